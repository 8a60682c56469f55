//! `tomus agent`: the light process of a compute-only node. It answers probes like a
//! provider does and announces itself to the manager every few seconds (the manager forgets
//! agents it has not heard from for its provider timeout), so the node takes part in
//! topology measurement without storing anything.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tomus_wire::manager::RegisterAgent;
use tomus_wire::{
    check_bind, wrong_service, ClusterSecret, Envelope, Error, Handler, LoadGauge, Pool, Reply,
    Result, RpcConfig, ServerLimits,
};

use crate::probe::Agent;

#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// `host:port` to listen on.
    pub listen: String,
    /// Address the others reach it at (default: the bound address).
    pub advertise: Option<String>,
    /// Its name in the matrix (default: the advertised address).
    pub name: Option<String>,
    pub manager: String,
    pub secret: Option<ClusterSecret>,
    /// Pause between announcements.
    pub interval: Duration,
}

struct AgentService(Agent);

impl Handler for AgentService {
    async fn handle(&self, req: Envelope, body: Bytes) -> Reply {
        match req {
            Envelope::Agent(r) => self.0.handle(r, body).await,
            other => wrong_service("topology agent", &other),
        }
    }
}

/// Runs the agent until the future is dropped. Sends the advertised address on `ready` once
/// it serves and the manager accepted its first announcement.
pub async fn run(
    config: AgentConfig,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| Error::invalid(format!("cannot listen on {}: {e}", config.listen)))?;
    let local = listener.local_addr()?;
    check_bind(&local, config.secret.as_ref())?;
    let addr = config
        .advertise
        .clone()
        .unwrap_or_else(|| local.to_string());
    let name = config.name.clone().unwrap_or_else(|| addr.clone());
    let service = Arc::new(AgentService(Agent::new(
        name.clone(),
        config.secret.clone(),
    )));
    let serving = tomus_wire::serve(
        listener,
        config.secret.clone(),
        ServerLimits::default(),
        service,
        Arc::new(LoadGauge::default()),
    );
    tokio::pin!(serving);
    let pool = Pool::new(RpcConfig {
        secret: config.secret.clone(),
        ..RpcConfig::default()
    });
    let announce = || {
        pool.call(
            &config.manager,
            RegisterAgent {
                name: name.clone(),
                addr: addr.clone(),
            },
        )
    };
    tokio::select! {
        _ = &mut serving => return Err(Error::internal("agent accept loop ended")),
        first = announce() => first?,
    }
    tracing::info!(
        "agent {name} at {addr} announced to the manager {}",
        config.manager
    );
    if let Some(tx) = ready {
        let _ = tx.send(addr.clone());
    }
    let mut tick = tokio::time::interval(config.interval);
    loop {
        tokio::select! {
            _ = &mut serving => return Err(Error::internal("agent accept loop ended")),
            _ = tick.tick() => {
                // A manager away for a while finds the agent again at its next announcement.
                if let Err(e) = announce().await {
                    tracing::warn!("announcing to the manager {}: {e}", config.manager);
                }
            }
        }
    }
}
