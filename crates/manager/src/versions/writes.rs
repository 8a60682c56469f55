//! Writes: version numbers assigned (append offsets fixed at assignment), completions, and
//! publication strictly in assignment order; leases and aborts that give versions up.

use super::*;

impl VersionManager {
    /// Assigns the next version of `blob` for `op`, to be published with `attrs`; with
    /// `expect_size`, only if the size after every assigned version is that. Version numbers
    /// are reserved durably a block at a time; that sync runs on a blocking thread, never
    /// under the blob's lock.
    pub async fn assign(
        &self,
        blob: BlobId,
        op: WriteOp,
        attrs: Attrs,
        expect_size: Option<u64>,
        data: DataAge,
    ) -> Result<Assignment> {
        let attr_bytes: usize = attrs.iter().map(|(k, v)| k.len() + v.len()).sum();
        if attr_bytes > MAX_ATTRS_BYTES {
            return Err(Error::invalid(format!(
                "version attributes hold {attr_bytes} bytes; the limit is {MAX_ATTRS_BYTES}"
            )));
        }
        let slot = self.slot(blob)?;
        loop {
            match self.try_assign(&slot, blob, op, &attrs, expect_size, data)? {
                Attempt::Assigned(a) => return Ok(a),
                Attempt::Reserve(upto) => self.reserve(&slot, blob, upto).await?,
            }
        }
    }

    /// Durably reserves version numbers of `blob` below `upto`, once for all the writers
    /// that need it at the same moment.
    async fn reserve(&self, slot: &BlobSlot, blob: BlobId, upto: Version) -> Result<()> {
        let _one = slot.reserving.lock().await;
        if slot.lock().reserved >= upto {
            return Ok(());
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.reserve(blob, upto))
            .await
            .map_err(|e| Error::internal(format!("reserving versions failed: {e}")))??;
        let mut s = slot.lock();
        s.reserved = s.reserved.max(upto);
        Ok(())
    }

    /// [`VersionManager::assign`] under the blob's lock, unless the next version number is
    /// not reserved yet.
    fn try_assign(
        &self,
        slot: &BlobSlot,
        blob: BlobId,
        op: WriteOp,
        attrs: &Attrs,
        expect_size: Option<u64>,
        data: DataAge,
    ) -> Result<Attempt> {
        let now = now_ms();
        let stored_since = now.saturating_sub(data.stored_ms);
        let reused_since = data.reused_ms.map(|age| now.saturating_sub(age));
        // Both held until the version is pending: a grant of cutoffs, or a removal of drained
        // providers, sees it pending or it sees the grant or the removal.
        let cutoffs = self.cutoffs.read().unwrap_or_else(|p| p.into_inner());
        let removed_before = self.drains.removals_read();
        check_data_age(blob, stored_since, reused_since, &cutoffs, *removed_before)?;
        let mut s = slot.lock();
        if s.deleted {
            return Err(s.gone_error());
        }
        if let Some(n) = &mut s.naming {
            n.touched = Instant::now();
        }
        if let Some(expected) = expect_size.filter(|e| *e != s.assigned_size) {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "blob {blob} has size {} (counting writes in flight), not {expected}",
                    s.assigned_size
                ),
            ));
        }
        let (offset, size, append) = match op {
            WriteOp::Write { size: 0, .. } => return Err(Error::invalid("empty write")),
            WriteOp::Append { size: 0 } => return Err(Error::invalid("zero-length append")),
            WriteOp::Write { offset, size } => (offset, size, false),
            WriteOp::Append { size } => (s.assigned_size, size, true),
            // Spans the old content too, so the part past the new size is cleared. Empty by
            // empty gives an empty span: a version that changes no byte (new attributes).
            WriteOp::Replace { size } => (0, size.max(s.assigned_size), false),
        };
        let end = offset
            .checked_add(size)
            .filter(|e| *e <= MAX_BLOB_SIZE)
            .ok_or_else(|| {
                Error::out_of_range(format!(
                    "write of {size} bytes at offset {offset} passes the {MAX_BLOB_SIZE} byte limit"
                ))
            })?;
        let new_size = match op {
            WriteOp::Replace { size } => size,
            _ => s.assigned_size.max(end),
        };
        let version = s.next_version;
        if version >= s.reserved {
            return Ok(Attempt::Reserve(version + RESERVE_BLOCK));
        }
        let capacity = s
            .assigned_capacity
            .max(capacity_for(s.record.chunk_size, end));
        let in_flight = s
            .pending
            .values()
            .map(|p| (p.info.version, p.info.span, p.info.capacity))
            .collect();
        let published = (s.record.published > 0).then_some((s.record.published, s.record.capacity));
        let span = Span::new(offset, size);
        let base = s.record.published;
        // Listed before the cutoffs' and the drains' guards are let go (see above).
        self.mark_active(&s);
        s.pending.insert(
            version,
            Pending {
                info: VersionInfo {
                    blob,
                    version,
                    span,
                    size: new_size,
                    capacity,
                    state: VersionState::Pending,
                    append,
                    published_ms: 0,
                },
                completed: false,
                assigned_at: Instant::now(),
                attrs: attrs.clone(),
                base,
                stored_since,
                reused_since,
            },
        );
        let m = tomus_metrics::manager();
        m.versions_assigned.inc();
        m.versions_in_flight.inc();
        s.next_version += 1;
        s.assigned_size = new_size;
        s.assigned_capacity = capacity;
        Ok(Attempt::Assigned(Assignment {
            version,
            span,
            capacity,
            published,
            in_flight,
        }))
    }

    /// Marks `version` complete and waits until it is published (durably).
    pub async fn complete(&self, blob: BlobId, version: Version) -> Result<VersionInfo> {
        let slot = self.slot(blob)?;
        let mut changes = slot.published.subscribe();
        {
            let mut s = slot.lock();
            if s.deleted {
                return Err(s.gone_error());
            }
            // A given-up version is no longer pending: it is answered below or in the wait.
            if version > s.record.published {
                match s.pending.get_mut(&version) {
                    Some(p) => p.completed = true,
                    None => return Err(not_pending(&s, blob, version)),
                }
                self.send_completed_prefix(&mut s);
            }
        }
        let deadline = tokio::time::Instant::now() + COMPLETE_WAIT;
        loop {
            {
                let s = slot.lock();
                if s.deleted {
                    return Err(s.gone_error());
                }
                // Before the published mark: a version given up while its writer waited
                // here is below it once later ones are published, and its writer must hear
                // why (to write again when it was given up behind a dead writer's).
                if s.given_up.contains_key(&version) {
                    return Err(not_pending(&s, blob, version));
                }
                if s.record.published >= version {
                    break;
                }
                if !s.pending.contains_key(&version) {
                    return Err(not_pending(&s, blob, version));
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::internal("version manager shut down")),
                Err(_) => {
                    return Err(Error::unavailable(format!(
                        "version {version} of blob {blob} is complete but waits for lower \
                         versions still in flight; it will be published once they finish"
                    )))
                }
            }
        }
        self.version(blob, Some(version))
    }

    /// Gives up every version whose writer has held it unfinished for longer than `lease`,
    /// with the versions assigned after it (their metadata refers to it): later writers are
    /// not blocked by a dead one. Returns how many versions were given up.
    pub fn expire_leases(&self, lease: Duration) -> Result<usize> {
        let mut given_up = 0;
        for (blob, slot) in self.active_slots() {
            let mut s = slot.lock();
            let expired = s
                .pending
                .iter()
                .find(|(_, p)| !p.completed && p.assigned_at.elapsed() > lease)
                .map(|(v, _)| *v);
            let Some(first) = expired else { continue };
            tracing::warn!(
                "blob {blob}: version {first} was not completed within its {:.1}s lease; \
                 versions {first}..{} given up",
                lease.as_secs_f64(),
                s.next_version
            );
            let range = self.give_up(&mut s, first, GiveUp::Expired);
            drop(s);
            given_up += range.1 - range.0;
            self.record_given_up(blob, &slot, range);
        }
        Ok(given_up as usize)
    }

    /// Gives up `version`, which its writer could not finish (its data or metadata failed to
    /// store), with the versions assigned after it, at once rather than after the lease. Given
    /// up already: nothing to do. Completed or published: refused.
    pub fn abort(&self, blob: BlobId, version: Version) -> Result<()> {
        let slot = self.slot(blob)?;
        let mut s = slot.lock();
        if s.given_up.contains_key(&version) {
            return Ok(());
        }
        match s.pending.get(&version) {
            Some(p) if !p.completed => {}
            Some(_) => {
                return Err(Error::invalid(format!(
                    "version {version} of blob {blob} is complete; it cannot be aborted"
                )))
            }
            None if version <= s.record.published && version > 0 => {
                return Err(Error::invalid(format!(
                    "version {version} of blob {blob} is published; it cannot be aborted"
                )))
            }
            None => return Err(not_pending(&s, blob, version)),
        }
        tracing::info!(
            "blob {blob}: version {version} aborted by its writer; versions {version}..{} given up",
            s.next_version
        );
        let range = self.give_up(&mut s, version, GiveUp::Abandoned);
        drop(s);
        self.record_given_up(blob, &slot, range);
        Ok(())
    }

    /// Gives up the pending versions from `first` on, `first` for `why` and the later ones as
    /// behind it, in memory (the caller records them durably once it let go of the blob's
    /// lock). Returns the range of version numbers given up.
    fn give_up(&self, s: &mut BlobState, first: Version, why: GiveUp) -> (Version, Version) {
        // A writer gone: retention it held back may go on.
        self.mark_expiry_due(s);
        let victims: Vec<Version> = s.pending.range(first..).map(|(v, _)| *v).collect();
        let m = tomus_metrics::manager();
        m.versions_aborted.inc_by(victims.len() as u64);
        m.versions_in_flight.dec_by(victims.len() as i64);
        for v in &victims {
            s.pending.remove(v);
            s.given_up.insert(
                *v,
                if *v == first {
                    why
                } else {
                    GiveUp::Behind(first)
                },
            );
        }
        // The next versions continue from the last one still standing; appends close the
        // gap the given-up ones leave.
        let (size, capacity) = match s.pending.values().next_back() {
            Some(p) => (p.info.size, p.info.capacity),
            None => (s.record.size, s.record.capacity),
        };
        s.assigned_size = size;
        s.assigned_capacity = capacity;
        (first, s.next_version)
    }

    /// Records versions given up durably, so a restart lists them as aborted too, and wakes
    /// their writers. Called without the blob's lock: the sync holds up no one. Should it
    /// fail, a restart aborts them anyway (every version unpublished at a restart is).
    fn record_given_up(&self, blob: BlobId, slot: &BlobSlot, (from, to): (Version, Version)) {
        if let Err(e) = self.store.put_aborted(blob, from, to) {
            tracing::error!("blob {blob}: recording versions {from}..{to} as aborted: {e}");
        }
        slot.published.send_modify(|_| {});
    }

    /// Hands the completed versions right above the last sent one to the committer.
    fn send_completed_prefix(&self, s: &mut BlobState) {
        // Pending holds every assigned version above the published one, in order; numbers
        // skipped by a restart were never assigned, so the next pending entry is the next
        // version to publish.
        let mut batch = Vec::new();
        let mut attrs = Vec::new();
        let now = now_ms();
        for p in s.pending.range(s.sent_upto + 1..).map(|(_, p)| p) {
            if !p.completed {
                break;
            }
            let mut info = p.info.clone();
            info.state = VersionState::Published;
            info.published_ms = now;
            if !p.attrs.is_empty() {
                attrs.push((info.version, p.attrs.clone()));
            }
            batch.push(info);
        }
        let Some(last) = batch.last() else { return };
        // The first publication of a new file's blob gives the file its name.
        let name = match (s.sent_upto, &s.naming) {
            (0, Some(n)) => Some(n.path.clone()),
            _ => None,
        };
        s.sent_upto = last.version;
        let record = BlobRecord {
            published: last.version,
            size: last.size,
            capacity: last.capacity,
            modified_ms: now,
            ..s.record.clone()
        };
        // The committer lives as long as the manager; a send failure means shutdown.
        let _ = self.commits.send(Publication {
            blob: record,
            versions: batch,
            attrs,
            name,
        });
    }

    /// Applies a durable publication to the in-memory state and wakes the waiting writers.
    pub(super) fn published(&self, p: Publication) {
        let Ok(slot) = self.slot(p.blob.id) else {
            return;
        };
        let mut s = slot.lock();
        if p.blob.published <= s.record.published {
            return;
        }
        let m = tomus_metrics::manager();
        for v in &p.versions {
            if let Some(pending) = s.pending.remove(&v.version) {
                m.versions_in_flight.dec();
                // Under the blob's lock, so a look for such writes finds it pending or sees
                // its publication.
                self.drains.published(pending.stored_since);
            }
        }
        m.versions_published.inc_by(p.versions.len() as u64);
        if let Some(last) = p.versions.last() {
            s.latest = last.clone();
        }
        s.record = p.blob;
        s.naming = None;
        self.mark_expiry_due(&mut s);
        let v = s.record.published;
        drop(s);
        slot.published.send_replace(v);
    }
}

/// Refuses a write whose data may be gone: data garbage collection may already have deleted
/// (older than its `cutoffs`), or data stored before `removed_before`, which may have gone to
/// a provider that drained and was removed (see `drains`). Each with the margin for the
/// writer's request in transit.
fn check_data_age(
    blob: BlobId,
    stored_since: u64,
    reused_since: Option<u64>,
    cutoffs: &Cutoffs,
    removed_before: u64,
) -> Result<()> {
    let older = |since: u64, cutoff: u64| since.saturating_sub(LATENCY_SLACK_MS) < cutoff;
    let collected = |since: u64, cutoff: u64, what: &str| {
        Error::new(
            ErrorKind::WriteExpired,
            format!(
                "the {what} of this write of blob {blob} date from {}s before garbage \
                 collection's cutoff (longer than its grace); they may have been reclaimed, \
                 so nothing was published: write the data again",
                (cutoff.saturating_sub(since) / 1000).max(1)
            ),
        )
    };
    if older(stored_since, cutoffs.fresh_ms) {
        return Err(collected(
            stored_since,
            cutoffs.fresh_ms,
            "chunks it stored",
        ));
    }
    if let Some(since) = reused_since.filter(|s| older(*s, cutoffs.reused_ms)) {
        return Err(collected(since, cutoffs.reused_ms, "chunks it reuses"));
    }
    if older(stored_since, removed_before) {
        return Err(Error::new(
            ErrorKind::WriteExpired,
            format!(
                "the chunks this write of blob {blob} stored date from before a drained \
                 provider was removed, and some may have been on it, so nothing was \
                 published: write the data again"
            ),
        ));
    }
    Ok(())
}

/// Why `version` of `blob` is not pending (any more).
fn not_pending(s: &BlobState, blob: BlobId, version: Version) -> Error {
    match s.given_up.get(&version) {
        Some(GiveUp::Behind(lower)) => Error::new(
            ErrorKind::Retry,
            format!(
                "version {version} of blob {blob} was given up with version {lower}, whose \
                 writer did not finish; the write can be done again"
            ),
        ),
        Some(GiveUp::Expired) => Error::new(
            ErrorKind::VersionAborted,
            format!(
                "version {version} of blob {blob} was aborted: its writer did not complete it \
                 within the lease"
            ),
        ),
        Some(GiveUp::Abandoned) => Error::new(
            ErrorKind::VersionAborted,
            format!(
                "version {version} of blob {blob} was aborted by its writer, which could not \
                 store its data"
            ),
        ),
        None if version < s.next_version => Error::new(
            ErrorKind::VersionAborted,
            format!("version {version} of blob {blob} was aborted"),
        ),
        None => Error::not_found(format!(
            "version {version} of blob {blob} was never assigned"
        )),
    }
}
