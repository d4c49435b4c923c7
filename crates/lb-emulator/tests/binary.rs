//! The binary as scripts use it: `--listen 127.0.0.1:0` prints the bound address on
//! the first stdout line, serves, and exits cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn http_get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn prints_its_address_serves_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lb-emulator"))
        .args(["--listen", "127.0.0.1:0", "--throttle-rate", "0.1"])
        .args([
            "--api-rate-limits",
            "--api-rate-limit",
            "slb:DescribeHealthStatus=5/60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let addr = first_line.trim().to_string();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr:?}"
    );

    let state = http_get(&addr, "/_emulator/state");
    assert!(state.starts_with("HTTP/1.1 200"), "{state}");
    assert!(state.contains("\"throttle_rate\":0.1"), "{state}");
    let calls = http_get(&addr, "/_emulator/calls");
    assert!(
        calls.starts_with("HTTP/1.1 200") && calls.contains("\"enabled\":true"),
        "{calls}"
    );
    // An unsigned API call is refused with the cloud's error document.
    let unsigned = http_get(&addr, "/?Action=DescribeVServerGroups&Version=2014-05-15");
    assert!(unsigned.starts_with("HTTP/1.1 400"), "{unsigned}");
    assert!(
        unsigned.contains("\"Code\":\"IncompleteSignature\"") && unsigned.contains("\"RequestId\""),
        "{unsigned}"
    );

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("SIGTERM"), "{log}");
}

#[test]
fn refuses_a_non_loopback_listen_address() {
    let output = Command::new(env!("CARGO_BIN_EXE_lb-emulator"))
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("loopback"));
}

#[test]
fn refuses_a_malformed_api_rate_limit() {
    let output = Command::new(env!("CARGO_BIN_EXE_lb-emulator"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--api-rate-limit",
            "DescribeHealthStatus=5",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("PRODUCT:Action=N/SECONDS"));
}
