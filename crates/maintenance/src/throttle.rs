//! A token bucket on bytes: repair copies wait for their size in tokens, so repair traffic
//! stays under a set rate and leaves the rest of the disks and network to foreground work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

pub struct Throttle {
    /// Bytes per second (0: unlimited). Changeable while in use, so a new rate applies to a
    /// running transfer without restarting it.
    rate: AtomicU64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    pub fn new(rate: u64) -> Self {
        Throttle {
            rate: AtomicU64::new(rate),
            state: Mutex::new((0.0, Instant::now())),
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Applies to the next [`Throttle::take`]s (a wait already under way keeps its length).
    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Ordering::Relaxed);
    }

    /// Waits until `bytes` may be sent. A request larger than one second's worth borrows
    /// from the future (the bucket goes negative) rather than waiting forever.
    pub async fn take(&self, bytes: u64) {
        let rate = self.rate();
        if rate == 0 {
            return;
        }
        let rate = rate as f64;
        let wait = {
            let mut state = self.state.lock().await;
            let (tokens, last) = &mut *state;
            let now = Instant::now();
            // At most one second of burst.
            *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(rate);
            *last = now;
            *tokens -= bytes as f64;
            if *tokens >= 0.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(-*tokens / rate)
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn limits_the_rate() {
        let t = Throttle::new(10 << 20);
        let start = Instant::now();
        // 10 MiB of burst, then 10 MiB more at 10 MiB/s: about one second.
        for _ in 0..20 {
            t.take(1 << 20).await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(900), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        let free = Throttle::new(0);
        let start = Instant::now();
        free.take(u64::MAX).await;
        assert!(start.elapsed() < Duration::from_millis(50));
        // Lifting the limit of a throttle in use frees its next takes.
        t.set_rate(0);
        let start = Instant::now();
        t.take(100 << 20).await;
        assert!(start.elapsed() < Duration::from_millis(50));
    }
}
