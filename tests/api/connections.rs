//! Limits enforced before any handler runs: the time a client may take to
//! send its headers, and the size of a request head.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::spawn_app_with;

/// Reads until the peer closes the connection (or `deadline` passes, which
/// fails the test): everything it sent.
async fn read_until_closed(stream: &mut TcpStream, deadline: Duration) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(deadline, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {deadline:?}"
    );
    String::from_utf8_lossy(&received).into_owned()
}

fn address(url: &str) -> &str {
    url.trim_start_matches("http://")
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let app = spawn_app_with(&[("http.header_read_timeout_ms", "300")]).await;
    let mut stream = TcpStream::connect(address(&app.public)).await.unwrap();
    stream
        .write_all(b"GET /partner/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: 1")
        .await
        .unwrap();
    // The deadline is well above the configured 300 ms and below the
    // default 10 s, so it fails unless the configured timeout is applied.
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(
        !answer.starts_with("HTTP/1.1 200"),
        "an unfinished request was answered: {answer}"
    );
}

#[tokio::test]
async fn a_request_head_over_the_limit_is_refused_with_431_and_a_normal_one_passes() {
    let app = spawn_app_with(&[("http.max_header_bytes", "16384")]).await;

    let mut stream = TcpStream::connect(address(&app.public)).await.unwrap();
    let big = "a".repeat(20 * 1024);
    let request = format!(
        "GET /partner/v1/health HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(20)).await;
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "expected 431, got: {}",
        answer.lines().next().unwrap_or("")
    );

    let response = app
        .client
        .get(format!("{}/partner/v1/health", app.public))
        .header("X-Padding", "b".repeat(4 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}
