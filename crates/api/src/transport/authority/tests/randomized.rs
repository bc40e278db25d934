//! Random connections and random corruption: decoded as the client meant,
//! never a panic, and the same output however the input is split into reads.

use super::*;

#[test]
fn random_connections_decode_as_the_client_meant_with_authority_fixed() {
    let authorities: [&[u8]; 6] = [
        b"localhost",
        GO_AUTHORITY,
        b"/var/lib/kubelet/device-plugins/kubelet.sock",
        b"",
        b"example.com:8080",
        b"bad authority with spaces",
    ];
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut encoder = ClientEncoder::new();
        let mut input = PREFACE.to_vec();
        frame(&mut input, 0x4, 0, 0, &[0, 1, 0, 0, 0x10, 0]);
        let mut expected = Vec::new();
        let mut stream = 1u32;
        for _ in 0..rng.random_range(1..8) {
            let authority = authorities[rng.random_range(0..authorities.len())];
            let mut fields = request(
                authority,
                format!("/svc.S/M{}", rng.random_range(0..4)).as_bytes(),
            );
            for extra in 0..rng.random_range(0..4) {
                let value: Vec<u8> = (0..rng.random_range(0..300))
                    .map(|_| rng.random_range(0x20..0x7f))
                    .collect();
                fields.push((format!("x-extra-{extra}").into_bytes(), value));
            }
            let block = encoder.encode(&as_refs(&fields), &mut rng);
            header_frames(&mut input, stream, &block, rng.random_bool(0.2), &mut rng);
            if rng.random_bool(0.5) {
                frame(
                    &mut input,
                    0x0,
                    0,
                    stream,
                    &vec![7u8; rng.random_range(0..100)],
                );
            }
            if rng.random_bool(0.2) {
                frame(&mut input, 0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
            }
            for (name, value) in &mut fields {
                if name.as_slice() == b":authority" && !is_valid_authority(value) {
                    *value = b"localhost".to_vec();
                }
            }
            expected.push(fields);
            stream += 2;
        }
        let chunk = rng.random_range(1..200);
        let (out, _) = run(&input, chunk).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got = fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap());
        assert_eq!(got, expected, "seed {seed}");
    }
}

/// Random corruption of valid connections: the rewriter must never panic,
/// and what it produces must not depend on how the input was split into reads.
#[test]
fn corrupted_streams_never_panic_and_chunking_never_changes_the_output() {
    for seed in 0..400u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut encoder = ClientEncoder::new();
        let mut input = PREFACE.to_vec();
        for stream in 0..rng.random_range(1..5u32) {
            let authority = if rng.random_bool(0.5) {
                GO_AUTHORITY
            } else {
                b"localhost"
            };
            let block = encoder.encode(&as_refs(&request(authority, b"/s.S/M")), &mut rng);
            header_frames(&mut input, 1 + 2 * stream, &block, false, &mut rng);
            frame(&mut input, 0x0, 0x1, 1 + 2 * stream, &[0, 0, 0, 0, 0]);
        }
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(PREFACE.len()..input.len());
            input[at] ^= 1 << rng.random_range(0..8);
        }
        let whole = run(&input, input.len());
        let bytewise = run(&input, 1);
        let chunked = run(&input, rng.random_range(2..64));
        match (whole, bytewise, chunked) {
            (Ok((a, _)), Ok((b, _)), Ok((c, _))) => {
                assert_eq!(a, b, "seed {seed}");
                assert_eq!(a, c, "seed {seed}");
            }
            (Err(a), Err(b), Err(c)) => {
                assert_eq!(a.to_string(), b.to_string(), "seed {seed}");
                assert_eq!(a.to_string(), c.to_string(), "seed {seed}");
            }
            (a, b, c) => panic!(
                "seed {seed}: outcome depends on chunking: {:?} {:?} {:?}",
                a.is_ok(),
                b.is_ok(),
                c.is_ok()
            ),
        }
    }
}
