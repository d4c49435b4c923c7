//! Binding the node API's port, and saying who holds it when it is taken.
//!
//! On OpenYurt and ACK Edge nodes yurthub serves the same node API on the same address
//! (`127.0.0.1:10267`), and node autonomy needs yurthub. There the agent is not wanted at
//! all: the controller-only layout (`deploy/without-agent`) is. So when the port is taken,
//! the agent asks the holder one question yurthub answers in a way of its own
//! (`GET /v1/healthz` → `200 OK`, which rollgate's agent does not serve) and exits with a
//! message that names yurthub and the layout, instead of crash-looping beside it with a
//! bare "address in use".
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// yurthub's health path on its serve port (OpenYurt v1.7.0,
/// `pkg/yurthub/server/server.go`, `registerHandlers`): `200`, body `OK`.
const YURTHUB_HEALTH_PATH: &str = "/v1/healthz";
/// The probe must never hold up the exit for long: the holder is on this machine.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Who answered on a taken port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortHolder {
    Yurthub,
    /// Something else answered, or nothing (a port in TIME_WAIT, another protocol).
    Unknown,
    /// Not probed: the address is not on this machine's loopback, and the agent
    /// never connects anywhere else.
    NotProbed,
}

/// Binds `listen`; when the port is taken, the error names the holder and what to do.
pub async fn bind(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    match TcpListener::bind(listen).await {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == ErrorKind::AddrInUse => {
            let holder = probe_holder(listen).await;
            Err(anyhow::anyhow!(taken_message(listen, &holder)))
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("binding the node API to {listen}"))),
    }
}

/// The message for a taken port, by holder.
pub fn taken_message(listen: SocketAddr, holder: &PortHolder) -> String {
    match holder {
        PortHolder::Yurthub => format!(
            "{listen} is taken by yurthub (it answers GET {YURTHUB_HEALTH_PATH} like yurthub \
             does). On nodes that run yurthub or ACK's edge-hub, yurthub serves the node API \
             itself and rollgate's agent must not run: install the controller-only layout \
             (kubectl apply -k deploy/without-agent) and disable yurt-manager's updater \
             (--controllers=*,-daemonpodupdater,-imagepreheat); see docs/layouts.md"
        ),
        PortHolder::Unknown | PortHolder::NotProbed => format!(
            "{listen} is already in use by another process (not yurthub, as far as a probe \
             of GET {YURTHUB_HEALTH_PATH} tells). Stop it, or give the agent another \
             address with --listen / ROLLGATE_AGENT_LISTEN"
        ),
    }
}

/// Asks the holder of `listen` whether it is yurthub, on loopback only.
pub async fn probe_holder(listen: SocketAddr) -> PortHolder {
    let ip = match listen.ip() {
        ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        ip if ip.is_loopback() => ip,
        _ => return PortHolder::NotProbed,
    };
    let target = SocketAddr::new(ip, listen.port());
    match tokio::time::timeout(PROBE_TIMEOUT, health_answer(target)).await {
        Ok(Some(answer)) if is_yurthub_health(&answer) => PortHolder::Yurthub,
        _ => PortHolder::Unknown,
    }
}

/// The raw answer to `GET /v1/healthz`, or `None` if the holder does not speak HTTP.
async fn health_answer(target: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect(target).await.ok()?;
    let request = format!(
        "GET {YURTHUB_HEALTH_PATH} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    // A health answer is a few bytes; never read more than a page from a stranger.
    stream.take(4096).read_to_end(&mut answer).await.ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// yurthub's answer: status 200 and the body `OK` (Go's `fmt.Fprintf(w, "OK")`).
fn is_yurthub_health(answer: &str) -> bool {
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    let status_ok = head
        .lines()
        .next()
        .is_some_and(|line| line.split_whitespace().nth(1) == Some("200"));
    status_ok && body.trim() == "OK"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder of a loopback port that answers every request with `answer`.
    async fn holder(answer: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        addr
    }

    /// What Go's net/http sends for yurthub's `healthz` handler.
    const YURTHUB: &str = "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\
                           Content-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\n\
                           Connection: close\r\n\r\nOK";

    #[tokio::test]
    async fn a_port_taken_by_yurthub_names_yurthub_and_the_layout() {
        let taken = holder(YURTHUB).await;
        let error = bind(taken).await.expect_err("the port is taken");
        let message = error.to_string();
        assert!(message.contains("taken by yurthub"), "{message}");
        assert!(message.contains("deploy/without-agent"), "{message}");
        assert!(message.contains("-daemonpodupdater"), "{message}");
    }

    #[tokio::test]
    async fn a_port_taken_by_something_else_is_not_blamed_on_yurthub() {
        for answer in [
            // rollgate's own agent: no such path.
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            // a 200 that is not yurthub's body
            "HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nhealthy",
            // not HTTP at all
            "SSH-2.0-OpenSSH_9.6\r\n",
        ] {
            let taken = holder(answer).await;
            assert_eq!(probe_holder(taken).await, PortHolder::Unknown, "{answer:?}");
            let message = bind(taken).await.expect_err("taken").to_string();
            assert!(message.contains("already in use"), "{message}");
            assert!(message.contains("--listen"), "{message}");
        }
    }

    #[tokio::test]
    async fn a_free_port_binds_and_a_remote_address_is_never_probed() {
        assert!(bind("127.0.0.1:0".parse().unwrap()).await.is_ok());
        // A documentation address (TEST-NET-1): the probe must not even try.
        let remote: SocketAddr = "192.0.2.1:10267".parse().unwrap();
        assert_eq!(probe_holder(remote).await, PortHolder::NotProbed);
    }
}
