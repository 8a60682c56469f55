//! Placement: which providers receive each new chunk's replicas.

use tomus_wire::{Error, ErrorKind, Placement, ProviderInfo, Result};

/// Chooses `replication` distinct providers for each of `count` chunks of `chunk_size` bytes.
///
/// `candidates` are alive providers with their estimated free bytes, which this function lowers
/// as it places, so consecutive chunks spread over providers of equal free space (one shared disk
/// in an embedded cluster) and fill emptier providers first otherwise. `Local` puts the first
/// replica on a provider of the writer's host when there is one with room.
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
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "replication {replication} needs {replication} live providers, {} available",
                candidates.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let mut chosen: Vec<usize> = Vec::with_capacity(r);
        if policy == Placement::Local {
            if let Some(host) = client_host {
                let local = candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, (p, free))| p.host == host && *free >= chunk_size)
                    .max_by_key(|(_, (p, free))| (*free, std::cmp::Reverse(p.id)))
                    .map(|(i, _)| i);
                chosen.extend(local);
            }
        }
        while chosen.len() < r {
            let best = candidates
                .iter()
                .enumerate()
                .filter(|(i, (_, free))| !chosen.contains(i) && *free >= chunk_size)
                .max_by_key(|(_, (p, free))| {
                    (*free, std::cmp::Reverse(p.chunks), std::cmp::Reverse(p.id))
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
    fn too_few_providers_or_no_space_is_an_error() {
        let mut c = vec![provider(1, "a", 1 << 30)];
        let e = place(&mut c, 1 << 20, 1, 2, Placement::Balanced, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSpace);
        let mut c = vec![provider(1, "a", 1 << 20)];
        let e = place(&mut c, 1 << 20, 2, 1, Placement::Balanced, None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoSpace);
    }
}
