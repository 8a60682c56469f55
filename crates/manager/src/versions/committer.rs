//! The committer: publications in batches. Everything queued while the previous commit ran
//! goes into the next fsynced transaction, so a thousand writers finishing at once cost a
//! few syncs, not a thousand.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::mpsc;
use tomus_wire::Result;
use tomus_worker::{Round, Worker};

use super::VersionManager;
use crate::store::Publication;

/// Pause before a failed commit is tried again.
const RETRY: Duration = Duration::from_millis(500);

pub(super) struct Committer {
    pub vm: Weak<VersionManager>,
    pub queue: mpsc::UnboundedReceiver<Publication>,
    /// The publication that ended the last pause.
    pub next: Option<Publication>,
    /// The queue closed: the version manager is gone.
    pub closed: bool,
    pub published: u64,
    pub commits: u64,
}

impl Worker for Committer {
    fn name(&self) -> &'static str {
        "committer"
    }

    fn interval(&self) -> Duration {
        Duration::ZERO
    }

    /// Waits for the next publication rather than for a time.
    async fn pause(&mut self) {
        match self.queue.recv().await {
            Some(p) => self.next = Some(p),
            None => self.closed = true,
        }
    }

    async fn work(&mut self) -> Result<Round> {
        let mut batch: Vec<Publication> = self.next.take().into_iter().collect();
        while let Ok(more) = self.queue.try_recv() {
            batch.push(more);
        }
        if batch.is_empty() {
            return Ok(if self.closed {
                Round::Done
            } else {
                Round::Idle
            });
        }
        let Some(manager) = self.vm.upgrade() else {
            return Ok(Round::Done);
        };
        let store = manager.store.clone();
        drop(manager);
        // Blobs deleted while their publications waited, and new files that could not take
        // their names: dropped, not published.
        let dropped = loop {
            let attempt = {
                let store = store.clone();
                // Moves the batch to the blocking pool and back so a failed commit can retry.
                let b = std::mem::take(&mut batch);
                tokio::task::spawn_blocking(move || {
                    let r = store.publish(&b);
                    (r, b)
                })
                .await
            };
            match attempt {
                Ok((Ok(dropped), b)) => {
                    batch = b;
                    break dropped;
                }
                Ok((Err(e), b)) => {
                    batch = b;
                    tracing::error!("publishing {} versions failed, retrying: {e}", batch.len());
                    tokio::time::sleep(RETRY).await;
                }
                Err(e) => {
                    return Err(tomus_wire::Error::internal(format!(
                        "publication task failed: {e}"
                    )))
                }
            }
        };
        let Some(manager) = self.vm.upgrade() else {
            return Ok(Round::Done);
        };
        manager.forget_blobs(&dropped.deleted);
        manager.forget_unnamed(&dropped.unnamed);
        self.commits += 1;
        for p in batch.into_iter().filter(|p| !dropped.contains(p.blob.id)) {
            self.published += 1;
            manager.published(p);
        }
        Ok(Round::Idle)
    }

    fn summary(&self) -> String {
        format!(
            "{} versions published in {} commits",
            self.published, self.commits
        )
    }
}
