//! Placement: which providers receive each new chunk's replicas.

use tomus_wire::{Error, ErrorKind, Placement, ProviderInfo, Result};

/// Free space within this fraction of the emptiest provider's counts as equally roomy.
const ROOMY: f64 = 0.9;

/// Chooses `replication` distinct providers for each of `count` chunks of `chunk_size` bytes.
///
/// `candidates` are alive providers with their estimated free bytes, which this function lowers
/// as it places. Providers whose free space is within `ROOMY` of the emptiest one's are
/// preferred, and among them the one holding the fewest chunks: providers on disks of
/// different fullness fill the emptier first, and providers of equal free space (or sharing one
/// disk, as in an embedded cluster, where reports taken moments apart differ by what was
/// written in between) take turns. `Local` puts the first replica on a provider of the
/// writer's host when there is one with room.
pub fn place(
    candidates: &mut [(ProviderInfo, u64)],
    chunk_size: u64,
    count: u32,
    replication: u32,
    policy: Placement,
    client_host: Option<&str>,
) -> Result<Vec<Vec<ProviderInfo>>> {
    let r = replication as usize;
    if candidates.len() < r {
        // Not a lack of space: providers are down or draining, and may come back.
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "replication {replication} needs {replication} live providers, {} available",
                candidates.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    // Chunks each candidate holds, counting this call's placements.
    let mut held: Vec<u64> = candidates.iter().map(|(p, _)| p.chunks).collect();
    for _ in 0..count {
        let emptiest = candidates.iter().map(|(_, free)| *free).max().unwrap_or(0);
        let roomy = |free: u64| free as f64 >= emptiest as f64 * ROOMY;
        let mut chosen: Vec<usize> = Vec::with_capacity(r);
        if policy == Placement::Local {
            if let Some(host) = client_host {
                let local = candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, (p, free))| p.host == host && *free >= chunk_size)
                    .max_by_key(|(i, (p, free))| {
                        (
                            roomy(*free),
                            std::cmp::Reverse(held[*i]),
                            *free,
                            std::cmp::Reverse(p.id),
                        )
                    })
                    .map(|(i, _)| i);
                chosen.extend(local);
            }
        }
        while chosen.len() < r {
            let best = candidates
                .iter()
                .enumerate()
                .filter(|(i, (_, free))| !chosen.contains(i) && *free >= chunk_size)
                .max_by_key(|(i, (p, free))| {
                    (
                        roomy(*free),
                        std::cmp::Reverse(held[*i]),
                        *free,
                        std::cmp::Reverse(p.id),
                    )
                })
                .map(|(i, _)| i);
            match best {
                Some(i) => chosen.push(i),
                None => {
                    return Err(Error::new(
                        ErrorKind::NoSpace,
                        format!(
                            "not enough free space: {replication} providers with {chunk_size} free bytes needed"
                        ),
                    ))
                }
            }
        }
        for &i in &chosen {
            candidates[i].1 -= chunk_size;
            held[i] += 1;
        }
        out.push(chosen.iter().map(|&i| candidates[i].0.clone()).collect());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(id: u32, host: &str, free: u64) -> (ProviderInfo, u64) {
        (
            ProviderInfo {
                id,
                addr: format!("{host}:{}", 7000 + id),
                host: host.into(),
                capacity: free,
                free,
                chunks: 0,
                load: 0,
                alive: true,
                draining: false,
                fault: None,
            },
            free,
        )
    }

    #[test]
    fn replicas_are_distinct_and_balanced() {
        let mut c: Vec<_> = (1..=4).map(|i| provider(i, "127.0.0.1", 1 << 30)).collect();
        let placed = place(&mut c, 1 << 20, 100, 2, Placement::Balanced, None).unwrap();
        let mut counts = [0usize; 5];
        for set in &placed {
            assert_eq!(set.len(), 2);
            assert_ne!(set[0].id, set[1].id);
            for p in set {
                counts[p.id as usize] += 1;
            }
        }
        assert_eq!(counts[1..].iter().sum::<usize>(), 200);
        assert!(counts[1..].iter().all(|&n| n == 50), "{counts:?}");
    }

    #[test]
    fn one_shared_disk_reported_moments_apart_still_balances() {
        // Four providers on one disk: each report saw a little less free space.
        let mut c: Vec<_> = (1..=4)
            .map(|i| provider(i, "127.0.0.1", (62 << 30) - i as u64 * (50 << 20)))
            .collect();
        let placed = place(&mut c, 64 << 10, 40, 2, Placement::Balanced, None).unwrap();
        let mut counts = [0usize; 5];
        for p in placed.iter().flatten() {
            counts[p.id as usize] += 1;
        }
        assert!(counts[1..].iter().all(|&n| n == 20), "{counts:?}");
    }

    #[test]
    fn emptier_providers_fill_first() {
        let mut c = vec![provider(1, "a", 10 << 20), provider(2, "b", 100 << 20)];
        let placed = place(&mut c, 1 << 20, 10, 1, Placement::Balanced, None).unwrap();
        assert!(placed.iter().all(|s| s[0].id == 2));
    }

    #[test]
    fn local_policy_prefers_writer_host() {
        let mut c = vec![
            provider(1, "10.0.0.1", 1 << 30),
            provider(2, "10.0.0.2", 1 << 30),
            provider(3, "10.0.0.3", 1 << 30),
        ];
        let placed = place(&mut c, 1 << 20, 20, 2, Placement::Local, Some("10.0.0.2")).unwrap();
        for set in placed {
            assert_eq!(set[0].id, 2);
            assert_ne!(set[1].id, 2);
        }
    }

    #[test]
    fn too_few_providers_or_no_space_are_errors() {
        let mut c = vec![provider(1, "a", 1 << 30)];
        let e = place(&mut c, 1 << 20, 1, 2, Placement::Balanced, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        let mut c = vec![provider(1, "a", 1 << 20)];
        let e = place(&mut c, 1 << 20, 2, 1, Placement::Balanced, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSpace);
    }
}
