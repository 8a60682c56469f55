//! The cluster on hosts: a manager and four providers, each in a network namespace.

use super::*;

pub(super) struct Net {
    pub(super) hosts: Hosts,
    pub(super) manager: String,
    /// Process index of provider `i` (on host `i + 1`).
    pub(super) providers: Vec<usize>,
}

impl Net {
    pub(super) fn start(label: &str) -> Net {
        let mut hosts = Hosts::new(label, 1 + PROVIDERS);
        let (_, manager) = hosts.spawn_manager(
            0,
            "manager",
            &[
                "--provider-timeout-ms",
                &PROVIDER_TIMEOUT_MS.to_string(),
                "--maintenance-interval-ms",
                "500",
                "--repair-rate",
                "0",
            ],
        );
        let providers = (0..PROVIDERS)
            .map(|i| {
                let name = format!("provider-{i}");
                hosts.spawn_provider(i + 1, &name, &manager, &name, &["--no-fsync"])
            })
            .collect();
        Net {
            hosts,
            manager,
            providers,
        }
    }

    pub(super) fn provider_addr(&self, i: usize) -> String {
        self.hosts.proc(self.providers[i]).addr.clone()
    }

    pub(super) fn client_options(&self) -> ClientOptions {
        ClientOptions {
            // A request to a host that was cut off gets no answer at all: give up on it after
            // seconds, not the default 30 s, so the workload goes on on the other replicas.
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            ..self.hosts.client_options()
        }
    }

    pub(super) async fn client(&self) -> Client {
        Client::connect(&self.manager, self.client_options())
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.manager))
    }

    pub(super) fn pool(&self) -> Arc<Pool> {
        let o = self.client_options();
        Pool::new(RpcConfig {
            connect_timeout: o.connect_timeout,
            request_timeout: o.request_timeout,
            secret: o.secret,
        })
    }
}

pub(super) async fn status(client: &Client) -> ClusterStatus {
    client.manager_call(GetStatus {}).await.expect("status")
}

/// Waits until the manager lists `n` providers, all alive.
pub(super) async fn wait_all_alive(client: &Client, n: usize) {
    let start = Instant::now();
    loop {
        let list = client.providers().await.expect("providers");
        if list.len() == n && list.iter().all(|p| p.alive) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "providers not all up: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the manager until it lists the provider at `addr` with `alive == want`; returns how
/// long after `since` that was, and the manager's clock then.
pub(super) async fn watch_alive(
    client: Client,
    addr: String,
    want: bool,
    since: Instant,
    limit: Duration,
) -> Option<(Duration, u64)> {
    loop {
        if let Ok(list) = client.providers().await {
            if list.iter().any(|p| p.addr == addr && p.alive == want) {
                let took = since.elapsed();
                let at_ms = status(&client).await.now_ms;
                return Some((took, at_ms));
            }
        }
        if since.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
