//! The hosts' network: namespaces, veth pairs and bridges made and removed with `ip`, `tc`
//! token buckets that shape links, and the sweep of what killed test processes left.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::{Host, Hosts};

/// Second octet of the test subnets: 10.77.C.0/24.
const SUBNET_B: u8 = 77;
/// Alias set on our bridges, followed by the owning test process's PID.
const BRIDGE_ALIAS: &str = "tomus-test-pid-";

impl Hosts {
    pub(super) fn setup_netns(&mut self, n: usize, switches: usize) -> Result<(), String> {
        if n > 250 {
            return Err(format!("{n} hosts do not fit a /24"));
        }
        sweep_stale();
        let pid = std::process::id();
        let (c, bridge) = claim_subnet()?;
        self.bridge = Some(bridge.clone());
        ip(&[
            "link",
            "set",
            "dev",
            &bridge,
            "alias",
            &format!("{BRIDGE_ALIAS}{pid}"),
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("10.{SUBNET_B}.{c}.254/24"),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", "dev", &bridge, "up"])?;
        let mut bridges = vec![bridge.clone()];
        for s in 1..switches {
            let name = format!("{bridge}s{s}");
            ip(&["link", "add", &name, "type", "bridge"])?;
            self.bridges.push(name.clone());
            ip(&[
                "link",
                "set",
                "dev",
                &name,
                "alias",
                &format!("{BRIDGE_ALIAS}{pid}"),
            ])?;
            ip(&["link", "set", "dev", &name, "up"])?;
            let (a, b) = (format!("tmv{c}x{s}a"), format!("tmv{c}x{s}b"));
            let _ = ip(&["link", "del", &a]);
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            self.uplinks.push((a.clone(), b.clone()));
            ip(&["link", "set", "dev", &a, "master", &bridge])?;
            ip(&["link", "set", "dev", &b, "master", &name])?;
            ip(&["link", "set", "dev", &a, "up"])?;
            ip(&["link", "set", "dev", &b, "up"])?;
            bridges.push(name);
        }
        for i in 0..n {
            let switch = i * switches / n;
            let host = Host {
                switch,
                ns: format!("tmsn-{pid}-{c}-{i}"),
                veth_br: format!("tmv{c}b{i}"),
                veth_ns: format!("tmv{c}n{i}"),
                ip: format!("10.{SUBNET_B}.{c}.{}", i + 1),
            };
            ip(&["netns", "add", &host.ns])?;
            self.hosts.push(host);
            let h = self.hosts.last().expect("just pushed");
            // A leftover of ours with this name would make the add fail; it is ours to remove.
            let _ = ip(&["link", "del", &h.veth_br]);
            ip(&[
                "link", "add", &h.veth_br, "type", "veth", "peer", "name", &h.veth_ns, "netns",
                &h.ns,
            ])?;
            ip(&[
                "link",
                "set",
                "dev",
                &h.veth_br,
                "master",
                &bridges[h.switch],
            ])?;
            ip(&["link", "set", "dev", &h.veth_br, "up"])?;
            ip(&["-n", &h.ns, "link", "set", "dev", "lo", "up"])?;
            ip(&[
                "-n",
                &h.ns,
                "addr",
                "add",
                &format!("{}/24", h.ip),
                "dev",
                &h.veth_ns,
            ])?;
            ip(&["-n", &h.ns, "link", "set", "dev", &h.veth_ns, "up"])?;
        }
        Ok(())
    }

    /// Limits host `host`'s link to `mbit` Mbit/s in both directions (a token bucket on each
    /// end of its veth pair).
    pub fn shape_host(&self, host: usize, mbit: u32) -> Result<(), String> {
        let h = &self.hosts[host];
        tbf(&[], &h.veth_br, mbit)?;
        tbf(&["-n", &h.ns], &h.veth_ns, mbit)
    }

    /// Limits the uplink of switch `s` (1..) to the first switch to `mbit` Mbit/s each way.
    pub fn shape_uplink(&self, s: usize, mbit: u32) -> Result<(), String> {
        let (a, b) = &self.uplinks[s - 1];
        tbf(&[], a, mbit)?;
        tbf(&[], b, mbit)
    }

    /// Removes namespaces, veths and the bridge (best effort; errors are printed).
    pub(super) fn teardown_network(&mut self) {
        for h in self.hosts.drain(..) {
            // Deleting the namespace (empty once its processes are reaped) destroys its veth
            // end and with it the pair; the explicit delete covers a namespace still pinned.
            if let Err(e) = ip(&["netns", "del", &h.ns]) {
                eprintln!("cleanup: {e}");
            }
            let _ = ip(&["link", "del", &h.veth_br]);
        }
        for (a, _) in self.uplinks.drain(..) {
            let _ = ip(&["link", "del", &a]);
        }
        for b in self.bridges.drain(..).chain(self.bridge.take()) {
            if let Err(e) = ip(&["link", "del", &b]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// Runs `ip ARGS`; the error carries its stderr.
pub(super) fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Replaces the root qdisc of `dev` (in the namespace `netns`, e.g. `["-n", NS]`) with a
/// token bucket of `mbit` Mbit/s: a small burst (32 KiB), so short probes see the rate, and
/// a queue of 20 ms.
fn tbf(netns: &[&str], dev: &str, mbit: u32) -> Result<(), String> {
    let rate = format!("{mbit}mbit");
    let tc = [
        "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst", "32kb", "latency",
        "20ms",
    ];
    let mut cmd = match netns {
        ["-n", ns] => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "tc"]);
            c
        }
        _ => Command::new("tc"),
    };
    let out = cmd
        .args(tc)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`tc {}` on {netns:?} failed: {}",
            tc.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Claims a free 10.77.C.0/24 by creating its bridge.
fn claim_subnet() -> Result<(u32, String), String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let start = u64::from(std::process::id()) * 31 + NEXT.fetch_add(7, Ordering::Relaxed) + nanos;
    let mut last = String::new();
    for k in 0..250u64 {
        let c = 1 + ((start + k) % 250) as u32;
        let name = format!("tmsb{SUBNET_B}x{c}");
        match ip(&["link", "add", &name, "type", "bridge"]) {
            Ok(_) => return Ok((c, name)),
            Err(e) if e.contains("exists") => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(format!("no free test subnet 10.{SUBNET_B}.*.0/24 ({last})"))
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes namespaces and bridges left by test processes that no longer exist (once per
/// process; best effort).
fn sweep_stale() {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        let me = std::process::id();
        let dead = |pid: Option<u32>| pid.is_some_and(|p| p != me && !pid_alive(p));
        if let Ok(out) = ip(&["-j", "netns", "list"]) {
            let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap_or_default();
            for ns in list {
                let Some(name) = ns.get("name").and_then(|n| n.as_str()) else {
                    continue;
                };
                let pid = name
                    .strip_prefix("tmsn-")
                    .and_then(|r| r.split('-').next())
                    .and_then(|p| p.parse().ok());
                if dead(pid) {
                    eprintln!("removing stale test namespace {name}");
                    let _ = ip(&["netns", "del", name]);
                }
            }
        }
        if let Ok(out) = ip(&["-j", "link", "show"]) {
            let links: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap_or_default();
            let name_of = |l: &serde_json::Value| {
                l.get("ifname")
                    .and_then(|n| n.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            for l in &links {
                let name = name_of(l);
                let Some(c) = name.strip_prefix(&format!("tmsb{SUBNET_B}x")) else {
                    continue;
                };
                let pid = l
                    .get("ifalias")
                    .and_then(|a| a.as_str())
                    .and_then(|a| a.strip_prefix(BRIDGE_ALIAS))
                    .and_then(|p| p.parse().ok());
                if dead(pid) {
                    eprintln!("removing stale test bridge {name}");
                    let (hosts, uplinks) = (format!("tmv{c}b"), format!("tmv{c}x"));
                    let ours = |n: &String| n.starts_with(&hosts) || n.starts_with(&uplinks);
                    for v in links.iter().map(name_of).filter(ours) {
                        let _ = ip(&["link", "del", &v]);
                    }
                    let _ = ip(&["link", "del", &name]);
                }
            }
        }
    });
}
