// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Sample {
    held: Vec<String>,
    known: BTreeMap<String, Vec<String>>,
}

fn sample() -> Sample {
    Sample {
        held: vec!["uid/c/example.com/gpu=a".into()],
        known: [(
            "example.com/gpu".to_string(),
            vec!["a".to_string(), "b".to_string()],
        )]
        .into(),
    }
}

fn file(dir: &Path) -> CheckpointFile {
    CheckpointFile::new(
        "test checkpoint",
        dir.join("state"),
        dir.join("state.backup"),
    )
}

#[test]
fn round_trips_with_an_identical_backup_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    let empty: Loaded<Sample> = file.load().unwrap();
    assert_eq!(empty.data, Sample::default());
    assert!(empty.recovered.is_none());
    file.write(&sample()).unwrap();
    assert_eq!(file.load::<Sample>().unwrap().data, sample());
    assert_eq!(
        std::fs::read(file.backup()).unwrap(),
        std::fs::read(file.path()).unwrap()
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only the checkpoint and its backup: {names:?}"
    );
}

/// The checkpoint's bytes damaged in the ways a disk or a careless hand
/// damages files: cut short, emptied, and single bits flipped.
fn damaged_versions(good: &[u8]) -> Vec<Vec<u8>> {
    let mut damaged = vec![good[..good.len() / 2].to_vec(), Vec::new()];
    for at in [0, good.len() / 3, good.len() / 2, good.len() - 10] {
        let mut flipped = good.to_vec();
        flipped[at] ^= 0x04;
        damaged.push(flipped);
    }
    damaged
}

fn corrupt_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect()
}

#[test]
fn a_damaged_checkpoint_is_kept_aside_and_everything_comes_back_from_the_backup() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    file.write(&sample()).unwrap();
    let good = std::fs::read(file.path()).unwrap();
    for bytes in damaged_versions(&good) {
        std::fs::write(file.path(), &bytes).unwrap();
        let loaded: Loaded<Sample> = file.load().unwrap();
        assert_eq!(loaded.data, sample(), "nothing is lost");
        let notice = loaded
            .recovered
            .expect("the damage is reported")
            .to_string();
        assert!(
            notice.contains("restored everything from its backup"),
            "{notice}"
        );
        assert_eq!(
            std::fs::read(file.path()).unwrap(),
            good,
            "the checkpoint is repaired"
        );
        let kept = corrupt_files(dir.path());
        assert_eq!(kept.len(), 1);
        assert_eq!(
            std::fs::read(&kept[0]).unwrap(),
            bytes,
            "the damaged file is kept"
        );
        std::fs::remove_file(&kept[0]).unwrap();
    }
}

#[test]
fn a_damaged_backup_beside_a_good_checkpoint_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    file.write(&sample()).unwrap();
    let good = std::fs::read(file.path()).unwrap();
    for bytes in damaged_versions(&good) {
        std::fs::write(file.backup(), &bytes).unwrap();
        let loaded: Loaded<Sample> = file.load().unwrap();
        assert_eq!(loaded.data, sample());
        assert!(loaded.recovered.is_none());
        assert_eq!(std::fs::read(file.backup()).unwrap(), good);
    }
    std::fs::remove_file(file.backup()).unwrap();
    file.load::<Sample>().unwrap();
    assert_eq!(
        std::fs::read(file.backup()).unwrap(),
        good,
        "a missing backup too"
    );
}

#[test]
fn when_both_copies_are_damaged_both_are_kept_aside_and_the_error_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    file.write(&sample()).unwrap();
    let good = std::fs::read(file.path()).unwrap();
    let damaged = damaged_versions(&good);
    for (i, bytes) in damaged.iter().enumerate() {
        let other = &damaged[(i + 1) % damaged.len()];
        std::fs::write(file.path(), bytes).unwrap();
        std::fs::write(file.backup(), other).unwrap();
        match file.load::<Sample>() {
            Err(error @ CheckpointError::Corrupt { .. }) => {
                assert!(error.to_string().contains("so is its backup"), "{error}");
            }
            // A flip inside a string can still be valid JSON with a matching
            // shape; the checksum must catch it.
            other => panic!("damage not detected: {other:?}"),
        }
        assert!(!file.path().exists() && !file.backup().exists());
        let mut kept: Vec<Vec<u8>> = corrupt_files(dir.path())
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        kept.sort();
        let mut want = vec![bytes.clone(), other.clone()];
        want.sort();
        assert_eq!(kept, want, "both damaged files are kept as they were");
        for p in corrupt_files(dir.path()) {
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn decode_errors_say_what_is_wrong() {
    let good = encode(&sample()).unwrap();
    assert!(matches!(
        decode::<Sample>(b"{"),
        Err(DecodeError::NotACheckpoint(_))
    ));
    let text = String::from_utf8(good).unwrap();
    let other_version = text.replace("\"version\": 1", "\"version\": 7");
    assert!(matches!(
        decode::<Sample>(other_version.as_bytes()),
        Err(DecodeError::UnknownVersion(7))
    ));
    let tampered = text.replace("gpu=a", "gpu=b");
    assert!(matches!(
        decode::<Sample>(tampered.as_bytes()),
        Err(DecodeError::ChecksumMismatch)
    ));
    assert!(matches!(
        decode::<Vec<u32>>(text.as_bytes()),
        Err(DecodeError::BadData(_))
    ));
}

#[test]
fn a_read_changes_nothing_on_disk_even_when_the_checkpoint_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    assert_eq!(
        file.read::<Sample>().unwrap(),
        Sample::default(),
        "none yet"
    );
    file.write(&sample()).unwrap();
    // The checkpoint cut short: the backup answers, and nothing is moved
    // aside or rewritten by the read.
    let good = std::fs::read(file.path()).unwrap();
    std::fs::write(file.path(), &good[..good.len() / 2]).unwrap();
    let before = std::fs::read(file.path()).unwrap();
    assert_eq!(file.read::<Sample>().unwrap(), sample());
    assert_eq!(std::fs::read(file.path()).unwrap(), before);
    assert!(corrupt_files(dir.path()).is_empty(), "nothing moved aside");
    // Both damaged: an error naming both, still nothing changed.
    std::fs::write(file.backup(), b"{").unwrap();
    let error = file.read::<Sample>().unwrap_err();
    assert!(matches!(error, CheckpointError::Damaged { .. }), "{error}");
    assert!(corrupt_files(dir.path()).is_empty());
}

#[test]
fn concurrent_writers_each_stage_their_own_files_and_the_last_rename_wins_whole() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::sync::Arc::new(file(dir.path()));
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let file = file.clone();
            std::thread::spawn(move || {
                for round in 0..25 {
                    let mut data = sample();
                    data.held = vec![format!("writer-{i}-{round}")];
                    file.write(&data).unwrap();
                    // A reader beside them always finds a whole checkpoint.
                    let read: Sample = file.read().unwrap();
                    assert!(read.held[0].starts_with("writer-"), "{read:?}");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
}

#[test]
fn a_write_that_fails_between_its_renames_leaves_the_checkpoint_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    file.write(&sample()).unwrap();
    // The backup's name taken by a directory that is not empty: its rename
    // fails, and the checkpoint is never replaced.
    std::fs::remove_file(file.backup()).unwrap();
    std::fs::create_dir(file.backup()).unwrap();
    std::fs::write(file.backup().join("keep"), b"x").unwrap();
    let mut other = sample();
    other.held = vec!["other".into()];
    assert!(file.write(&other).is_err());
    assert_eq!(file.read::<Sample>().unwrap(), sample());
    let staged = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp-")
        })
        .count();
    assert_eq!(staged, 0, "its temporary files are removed");
}

#[test]
fn the_writers_load_removes_temporary_files_a_crashed_writer_left() {
    let dir = tempfile::tempdir().unwrap();
    let file = file(dir.path());
    file.write(&sample()).unwrap();
    let left = dir.path().join("state.tmp-999-0");
    std::fs::write(&left, b"half").unwrap();
    assert_eq!(file.read::<Sample>().unwrap(), sample());
    assert!(left.exists(), "a reader leaves it");
    assert_eq!(file.load::<Sample>().unwrap().data, sample());
    assert!(!left.exists(), "the writer's load removes it");
}
