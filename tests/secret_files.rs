//! Secrets by file: `ORBIT_RECEIVER_DSN_FILE` (and the other `*_FILE`
//! variables) name a private file holding the value, as systemd's
//! credentials or a container's secrets hand it over; a file others may
//! read, an empty one, or one beside its variable is refused with exit 2.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::orbit::receiver;
use common::{dsn_for, random_hex, write_private, TestDb};

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test]
async fn the_dsn_is_read_from_the_private_file_orbit_receiver_dsn_file_names() {
    let db = TestDb::initialized().await;
    let dsn = dsn_for(&db.name);
    let path = std::env::temp_dir().join(format!("dsn-{}", random_hex(4)));
    write_private(&path, format!("{dsn}\n").as_bytes());
    let out = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN_FILE", &path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(&dsn), "{}", text(&out));
}

#[test]
fn a_secret_file_others_may_read_an_empty_one_or_one_beside_its_variable_is_refused() {
    let path = std::env::temp_dir().join(format!("dsn-{}", random_hex(4)));
    let dsn = "mysql://receiver:sentinel-password@127.0.0.1:1/receiver";
    let run = |env: &[(&str, &str)]| {
        receiver()
            .arg("verify")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let file = path.to_str().unwrap();

    std::fs::write(&path, dsn).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = run(&[("ORBIT_RECEIVER_DSN_FILE", file)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("ORBIT_RECEIVER_DSN_FILE"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("chmod 600"), "{}", text(&out));

    std::fs::remove_file(&path).unwrap();
    write_private(&path, b"\n");
    let out = run(&[("ORBIT_RECEIVER_DSN_FILE", file)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("is empty"), "{}", text(&out));

    std::fs::remove_file(&path).unwrap();
    write_private(&path, dsn.as_bytes());
    let out = run(&[
        ("ORBIT_RECEIVER_DSN_FILE", file),
        ("ORBIT_RECEIVER_DSN", dsn),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("ORBIT_RECEIVER_DSN and ORBIT_RECEIVER_DSN_FILE are both set"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("sentinel-password"), "{}", text(&out));
    let _ = std::fs::remove_file(&path);
}
