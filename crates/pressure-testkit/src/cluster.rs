//! [`RedisCluster`]: three cluster-enabled `redis-server`s on free loopback
//! ports, joined by `redis-cli --cluster create` into a 3-master cluster —
//! or any other number of masters ([`RedisCluster::try_start_masters`]),
//! for benches that compare 1, 2 and 3 shards.

use crate::process::StartError;
use crate::server::{free_ports, RedisServer};
use crate::{require, resp, Program};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Masters in the cluster of [`RedisCluster::start`] (no replicas).
const MASTERS: usize = 3;
/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16_384;
/// Attempts at finding free ports for one node.
const PORT_ATTEMPTS: usize = 20;
/// How long `redis-cli --cluster create` may take, in 50 ms steps (60 s).
const CREATE_STEPS: u32 = 1_200;
/// How long the nodes may take to agree on `cluster_state:ok`, in 100 ms
/// steps (30 s).
const OK_STEPS: u32 = 300;

/// A 3-master Redis Cluster on loopback (`--cluster-replicas 0`), every
/// node with its own directory and `nodes.conf`. Its nodes are
/// [`RedisServer`]s, so they go away like one: on drop, or with the test
/// process.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node
    /// reports `cluster_state:ok` with all 16384 slots assigned.
    ///
    /// # Panics
    /// With one line naming the package to install when `redis-server` or
    /// `redis-cli` is not on `PATH`, or with the reason the cluster did not
    /// form.
    #[track_caller]
    pub fn start() -> Self {
        crate::or_panic(Self::try_start())
    }

    /// [`start`](Self::start), with the reason as one line instead of a panic.
    pub fn try_start() -> Result<Self, String> {
        Self::try_start_masters(MASTERS)
    }

    /// A cluster of `masters` masters (1 to 16) instead of 3, the slots
    /// split evenly in order; the reason as one line when it cannot start.
    ///
    /// `redis-cli --cluster create` refuses fewer than 3 masters, so a
    /// cluster of 1 or 2 is made by hand: `CLUSTER ADDSLOTS` on every node,
    /// then `CLUSTER MEET` — the same layout the tool gives 3 or more.
    pub fn try_start_masters(masters: usize) -> Result<Self, String> {
        if !(1..=16).contains(&masters) {
            return Err(format!("a test cluster has 1 to 16 masters, not {masters}"));
        }
        let major = require(Program::Server)?;
        if masters >= 3 {
            require(Program::Cli)?;
        }
        let mut nodes = Vec::with_capacity(masters);
        let mut buses = Vec::with_capacity(masters);
        for _ in 0..masters {
            let (node, bus) = start_node(major)?;
            nodes.push(node);
            buses.push(bus);
        }
        let cluster = Self { nodes };
        if masters >= 3 {
            cluster.create()?;
        } else {
            cluster.assign(&buses, major)?;
        }
        cluster.wait_ok()?;
        Ok(cluster)
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) every node, as
    /// [`RedisServer::pause`] does one.
    pub fn pause(&self, paused: bool) {
        for n in &self.nodes {
            n.pause(paused);
        }
    }

    /// Node `i` (0-based, in slot order: node `i` of `n` serves slots
    /// `i·16384/n ..< (i+1)·16384/n`), to freeze or query one master alone.
    pub fn node(&self, i: usize) -> Option<&RedisServer> {
        self.nodes.get(i)
    }

    /// The nodes' URLs, `redis://127.0.0.1:<port>` each.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    fn create(&self) -> Result<(), String> {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run redis-cli --cluster create: {e}"))?;
        for _ in 0..CREATE_STEPS {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
        }
        // Its output is a few KiB: it fits in the pipes while it runs.
        let out = child
            .wait_with_output()
            .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Err(format!(
            "redis-cli --cluster create failed ({}): {}",
            out.status,
            text.trim().replace('\n', " | ")
        ))
    }

    /// Gives node `i` of `n` the slots `i·16384/n ..< (i+1)·16384/n` and
    /// introduces every other node to the first (`buses`: their cluster bus
    /// ports, in order; before Redis 7 `MEET` takes no bus port, it is
    /// port + 10000).
    fn assign(&self, buses: &[u16], major: u32) -> Result<(), String> {
        let n = self.nodes.len();
        for (i, node) in self.nodes.iter().enumerate() {
            let slots: Vec<String> = (i * SLOTS / n..(i + 1) * SLOTS / n)
                .map(|s| s.to_string())
                .collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            resp::command(node.port(), &args)
                .map_err(|e| format!("127.0.0.1:{}: CLUSTER ADDSLOTS: {e}", node.port()))?;
        }
        let first = self.nodes[0].port();
        for (node, bus) in self.nodes.iter().zip(buses).skip(1) {
            let (port, bus) = (node.port().to_string(), bus.to_string());
            let mut args = vec!["CLUSTER", "MEET", "127.0.0.1", port.as_str()];
            if major >= 7 {
                args.push(bus.as_str());
            }
            resp::command(first, &args)
                .map_err(|e| format!("127.0.0.1:{first}: CLUSTER MEET {port}: {e}"))?;
        }
        Ok(())
    }

    fn wait_ok(&self) -> Result<(), String> {
        let mut last = String::new();
        let known = self.nodes.len();
        for _ in 0..OK_STEPS {
            match self
                .nodes
                .iter()
                .map(|n| node_ok(n.port(), known))
                .find(|r| r.is_err())
            {
                None => return Ok(()),
                Some(Err(e)) => last = e,
                Some(Ok(())) => {}
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the test cluster did not reach cluster_state:ok within {} s: {last}",
            u64::from(OK_STEPS) / 10
        ))
    }
}

/// Whether the node on `port` sees a healthy cluster of `masters` nodes
/// with every slot assigned.
pub(crate) fn node_ok(port: u16, masters: usize) -> Result<(), String> {
    let info = resp::command(port, &["CLUSTER", "INFO"]).map_err(|e| format!("127.0.0.1:{port}: {e}"))?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or("?")
            .to_owned()
    };
    let (state, slots, known) = (
        field("cluster_state"),
        field("cluster_slots_assigned"),
        field("cluster_known_nodes"),
    );
    if state == "ok" && slots == SLOTS.to_string() && known == masters.to_string() {
        Ok(())
    } else {
        Err(format!(
            "127.0.0.1:{port}: cluster_state:{state} cluster_slots_assigned:{slots} cluster_known_nodes:{known}"
        ))
    }
}

/// One cluster-enabled node and its cluster bus port. Redis ≥ 7 takes its
/// bus port explicitly (`--cluster-port`); older servers use port + 10000,
/// which must be free too.
fn start_node(major: u32) -> Result<(RedisServer, u16), String> {
    let mut last = String::from("no attempt");
    for _ in 0..PORT_ATTEMPTS {
        let ports = free_ports(2).map_err(|e| format!("no free loopback port: {e}"))?;
        let (port, bus) = if major >= 7 {
            (ports[0], ports[1])
        } else {
            match ports[0].checked_add(10_000) {
                Some(bus) if std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok() => (ports[0], bus),
                _ => continue,
            }
        };
        let mut extra: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        if major >= 7 {
            extra.extend(["--cluster-port".to_owned(), bus.to_string()]);
        }
        match RedisServer::try_start_on(port, &extra) {
            Ok(node) => return Ok((node, bus)),
            Err(StartError::PortTaken) => last = format!("ports {port}/{bus} taken"),
            Err(StartError::Failed(e)) => return Err(e),
        }
    }
    Err(format!(
        "no free ports for a cluster node after {PORT_ATTEMPTS} attempts ({last})"
    ))
}
