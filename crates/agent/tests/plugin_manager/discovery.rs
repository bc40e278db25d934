//! Which sockets are registered and deregistered as they appear, disappear
//! and are replaced: at start, in nested and moved directories, recreated,
//! ignored files, a registry removed and made again.

use nodeplugins::plugin_manager::PluginState;
use nodeplugins_test_support::fake_plugin::FakePlugin;
use nodeplugins_test_support::wait::watch_until;

use super::common::{Harness, TIMEOUT, TYPE};
use super::plugin;

#[tokio::test]
async fn running_plugins_present_at_start_are_registered() {
    // Plugins already serving before the manager starts.
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("plugins_registry");
    std::fs::create_dir_all(registry.join("x/y")).unwrap();
    let mut servers = Vec::new();
    for (i, sub) in ["", "x", "x/y"].iter().enumerate() {
        let path = registry.join(sub).join(format!("early{i}.sock"));
        servers.push(
            FakePlugin::builder(TYPE, &format!("early{i}.example.com"))
                .serve(path)
                .await,
        );
    }
    let h = Harness::start_with(
        |_| {},
        |d| {
            for entry in std::fs::read_dir(&registry).unwrap() {
                let entry = entry.unwrap();
                std::fs::rename(entry.path(), d.join(entry.file_name())).unwrap();
            }
        },
    )
    .await;
    let calls = h
        .wait_for_calls("three registers", |c| {
            c.iter().filter(|c| c.starts_with("register")).count() == 3
        })
        .await;
    for i in 0..3 {
        let name = format!("early{i}.example.com");
        let validate = calls
            .iter()
            .position(|c| *c == format!("validate {name}"))
            .unwrap();
        let register = calls
            .iter()
            .position(|c| *c == format!("register {name}"))
            .unwrap();
        assert!(validate < register);
    }
    for server in &servers {
        let mut n = server.notifications();
        watch_until("notify", &mut n, TIMEOUT, |n| n.len() == 1).await;
    }
}

#[tokio::test]
async fn sockets_created_later_in_new_nested_directories_are_registered() {
    let h = Harness::start().await;
    std::fs::create_dir_all(h.sock("late/deeper/still")).unwrap();
    let p = plugin(&h, "late/deeper/still/x.sock", "late.example.com").await;
    let status = h.wait_registered(p.socket()).await;
    assert_eq!(status.name.as_deref(), Some("late.example.com"));
}

#[tokio::test]
async fn removing_the_socket_deregisters_with_name_and_endpoint() {
    let h = Harness::start().await;
    let p = plugin(&h, "gone.sock", "gone.example.com").await;
    h.wait_registered(p.socket()).await;
    let socket = p.socket().to_owned();
    p.stop().await;
    h.wait_for_calls("deregister", |c| {
        c.contains(&format!("deregister gone.example.com {}", socket.display()))
    })
    .await;
    h.wait_for("empty table", |t| t.is_empty()).await;
}

#[tokio::test]
async fn recreated_socket_deregisters_then_registers_with_a_new_generation() {
    let h = Harness::start().await;
    let mut generation = 0;
    let mut p = plugin(&h, "same.sock", "v0.example.com").await;
    for round in 1..=5 {
        let status = h.wait_registered(p.socket()).await;
        assert!(status.generation > generation, "generations must increase");
        generation = status.generation;
        p.stop().await;
        p = plugin(&h, "same.sock", &format!("v{round}.example.com")).await;
        let name = format!("v{round}.example.com");
        h.wait_for("new instance", |t| {
            t.iter()
                .any(|r| r.name.as_deref() == Some(&name) && r.state == PluginState::Registered)
        })
        .await;
    }
    let calls = h.handler.snapshot();
    let socket = h.sock("same.sock").display().to_string();
    let expected: Vec<String> = (0..5)
        .flat_map(|i| {
            [
                format!("validate v{i}.example.com"),
                format!("register v{i}.example.com"),
                format!("deregister v{i}.example.com {socket}"),
            ]
        })
        .chain([
            "validate v5.example.com".to_string(),
            "register v5.example.com".to_string(),
        ])
        .collect();
    assert_eq!(calls, expected);
    assert_eq!(h.handle.status().await.unwrap().len(), 1);
}

#[tokio::test]
async fn plain_files_and_dot_files_are_ignored() {
    let h = Harness::start().await;
    std::fs::write(h.sock("not-a-socket.sock"), b"x").unwrap();
    std::fs::create_dir_all(h.sock(".hidden-dir")).unwrap();
    let _dot = FakePlugin::builder(TYPE, "dot.example.com")
        .serve(h.sock(".dot.sock"))
        .await;
    let _hidden = FakePlugin::builder(TYPE, "hidden.example.com")
        .serve(h.sock(".hidden-dir/x.sock"))
        .await;
    let real = plugin(&h, "real.sock", "real.example.com").await;
    let table = h.wait_registered(real.socket()).await;
    assert_eq!(table.name.as_deref(), Some("real.example.com"));
    let all = h.handle.status().await.unwrap();
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        !h.handler
            .snapshot()
            .iter()
            .any(|c| c.contains("dot") || c.contains("hidden"))
    );
}

#[tokio::test]
async fn directories_moved_in_and_out_bring_and_take_their_sockets() {
    let h = Harness::start().await;
    let outside = h._dir.path().join("outside");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    let p = FakePlugin::builder(TYPE, "mover.example.com")
        .serve(outside.join("sub/m.sock"))
        .await;
    std::fs::rename(&outside, h.sock("moved")).unwrap();
    let moved = h.sock("moved/sub/m.sock");
    h.wait_registered(&moved).await;
    std::fs::rename(h.sock("moved"), &outside).unwrap();
    h.wait_for_calls("deregister", |c| {
        c.iter()
            .any(|c| c.starts_with("deregister mover.example.com"))
    })
    .await;
    h.wait_for("empty", |t| t.is_empty()).await;
    drop(p);
}

#[tokio::test]
async fn a_registry_removed_with_registered_plugins_and_made_again_registers_new_plugins() {
    let h = Harness::start().await;
    let first = plugin(&h, "a.sock", "a.example.com").await;
    let second = plugin(&h, "b.sock", "b.example.com").await;
    h.wait_registered(first.socket()).await;
    h.wait_registered(second.socket()).await;

    // `rm -rf plugins_registry; mkdir plugins_registry`, as an operator would.
    std::fs::remove_dir_all(&h.registry_dir).unwrap();
    match std::fs::create_dir(&h.registry_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("mkdir: {e}"),
    }
    h.wait_for_calls("both deregistered", |c| {
        ["a.example.com", "b.example.com"].iter().all(|name| {
            c.iter()
                .any(|c| c.starts_with(&format!("deregister {name}")))
        })
    })
    .await;

    let third = plugin(&h, "c.sock", "c.example.com").await;
    std::fs::create_dir_all(h.sock("sub")).unwrap();
    let fourth = plugin(&h, "sub/d.sock", "d.example.com").await;
    h.wait_registered(third.socket()).await;
    h.wait_registered(fourth.socket()).await;
    let table = h.wait_for("only the new plugins", |t| t.len() == 2).await;
    assert!(table.iter().all(|p| p.state == PluginState::Registered));
    drop((first, second));
}
