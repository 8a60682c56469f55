//! A token bucket on bytes: repair copies wait for their size in tokens, so repair traffic
//! stays under a set rate and leaves the rest of the disks and network to foreground work.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

pub struct Throttle {
    /// Bytes per second (0: unlimited).
    rate: u64,
    state: Mutex<(f64, Instant)>,
}

impl Throttle {
    pub fn new(rate: u64) -> Self {
        Throttle {
            rate,
            state: Mutex::new((0.0, Instant::now())),
        }
    }

    /// Waits until `bytes` may be sent. A request larger than one second's worth borrows
    /// from the future (the bucket goes negative) rather than waiting forever.
    pub async fn take(&self, bytes: u64) {
        if self.rate == 0 {
            return;
        }
        let rate = self.rate as f64;
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
    }
}
