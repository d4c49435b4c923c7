//! The world's clock: each tick asks it which backends a tcp-mode health check
//! probes, connects to those on this machine only, and hands it the answers.
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use crate::state::AppState;

pub(crate) async fn tick_forever(shared: AppState) {
    let mut interval = tokio::time::interval(shared.config.tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let now = tokio::time::Instant::now();
        let targets = shared
            .world
            .lock()
            .expect("world lock")
            .probe_targets(now, shared.config.probe_interval);
        let mut probes = HashMap::new();
        if !targets.is_empty() {
            let checks = targets.into_iter().map(|(ip, port)| async move {
                let ok = match probe_address(&ip, port) {
                    Some(addr) => tokio::time::timeout(
                        Duration::from_millis(300),
                        tokio::net::TcpStream::connect(addr),
                    )
                    .await
                    .is_ok_and(|r| r.is_ok()),
                    // Never connect off this machine: a non-loopback backend is
                    // reported unhealthy without a packet sent.
                    None => false,
                };
                ((ip, port), ok)
            });
            probes.extend(futures_join_all(checks).await);
        }
        shared.world.lock().expect("world lock").tick(now, &probes);
    }
}

/// Where a tcp-mode health probe may connect: loopback addresses only. Simulated pod
/// IPs (10.x) and anything else that is not this machine get `None`, so the emulator
/// can never send traffic off the host, whatever a test registers.
pub fn probe_address(ip: &str, port: u16) -> Option<SocketAddr> {
    let ip: std::net::IpAddr = ip.parse().ok()?;
    ip.is_loopback().then_some(SocketAddr::new(ip, port))
}

/// Runs futures concurrently (few enough here that spawning is fine).
async fn futures_join_all<F, T>(futures: impl IntoIterator<Item = F>) -> Vec<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        if let Ok(value) = handle.await {
            out.push(value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_probes_only_ever_go_to_loopback() {
        assert_eq!(
            probe_address("127.0.0.1", 80),
            Some(SocketAddr::from(([127, 0, 0, 1], 80)))
        );
        assert!(probe_address("::1", 80).is_some());
        for off_host in [
            "10.0.0.7",
            "10.244.1.9",
            "192.168.0.1",
            "198.51.100.10",
            "0.0.0.0",
            "::",
            "localhost",
            "",
            "not-an-ip",
        ] {
            assert_eq!(probe_address(off_host, 80), None, "{off_host}");
        }
    }
}
