//! A network namespace joined to this one by a veth pair, with nftables rules on its side: the
//! one way to make a real kernel drop SYNs (a blackholed host) or answer them with a reset,
//! without touching the host's own firewall. Needs root, `ip` and `nft` (Debian `nftables`).
//!
//! Each namespace gets a /30 in 10.231.0.0/16 (near end `.1`, far end `.2` of the block) chosen
//! from the process id and a counter, and a name carrying both, so parallel tests and test
//! processes do not collide.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};

/// What the namespace's firewall does to TCP connections to a port.
#[derive(Debug, Clone, Copy)]
pub enum Rule {
    /// Drop the SYN silently: the connect never completes.
    Drop(u16),
    /// Answer the SYN with a TCP reset: the connect is refused.
    Reset(u16),
}

/// A namespace with one veth link and an nftables `input` chain; deleted on drop (which also
/// removes both veth ends).
#[derive(Debug)]
pub struct NetNs {
    name: String,
    far: Ipv4Addr,
}

/// Why no namespace can be made here, or `Ok`.
pub fn availability() -> Result<(), String> {
    for (tool, flag, hint) in [("ip", "-V", "iproute2"), ("nft", "--version", "nftables")] {
        let ok = Command::new(tool)
            .arg(flag)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!("`{tool}` not found (apt-get install {hint})"));
        }
    }
    if !std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    }) {
        return Err("network namespaces need root".into());
    }
    Ok(())
}

impl NetNs {
    /// Makes a namespace whose address applies `rules`; `None` after a loud skip when the tools
    /// or privileges are missing (panics under `CI=true`).
    pub fn start_or_skip(rules: &[Rule]) -> Option<NetNs> {
        if let Err(why) = availability() {
            super::super::skip_or_panic(&format!("network namespace unavailable: {why}"));
            return None;
        }
        Some(Self::start(rules))
    }

    /// Makes a namespace whose address applies `rules`; panics naming the failing command.
    pub fn start(rules: &[Rule]) -> NetNs {
        static NEXT: AtomicU8 = AtomicU8::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        // 16384 /30 blocks: four per process (the counter), by the low 12 bits of the pid.
        let block = (pid % 4096) * 4 + u32::from(n % 4);
        let [_, _, hi, lo] = (block * 4).to_be_bytes();
        let name = format!("rpf-{pid}-{n}");
        let ns = NetNs {
            name: name.clone(),
            far: Ipv4Addr::new(10, 231, hi, lo + 2),
        };
        let (near_if, far_if) = (format!("rpa{pid:x}{n}"), format!("rpb{pid:x}{n}"));
        let near = format!("10.231.{hi}.{}/30", lo + 1);
        let far = format!("{}/30", ns.far);
        run(&["ip", "netns", "add", &name]);
        run(&[
            "ip", "link", "add", &near_if, "type", "veth", "peer", "name", &far_if, "netns", &name,
        ]);
        run(&["ip", "addr", "add", &near, "dev", &near_if]);
        run(&["ip", "link", "set", &near_if, "up"]);
        ns.exec(&["ip", "addr", "add", &far, "dev", &far_if]);
        ns.exec(&["ip", "link", "set", &far_if, "up"]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        let mut script = String::from(
            "table inet readyprobe_faults {\n chain input {\n  type filter hook input priority 0; policy accept;\n",
        );
        for rule in rules {
            script.push_str(&match rule {
                Rule::Drop(port) => format!("  tcp dport {port} drop\n"),
                Rule::Reset(port) => format!("  tcp dport {port} reject with tcp reset\n"),
            });
        }
        script.push_str(" }\n}\n");
        let path = std::env::temp_dir().join(format!("{name}.nft"));
        std::fs::write(&path, script).expect("write nft script");
        ns.exec(&["nft", "-f", &path.display().to_string()]);
        let _ = std::fs::remove_file(&path);
        ns
    }

    /// The namespace's address (behind its firewall).
    pub fn addr(&self) -> Ipv4Addr {
        self.far
    }

    fn exec(&self, args: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
