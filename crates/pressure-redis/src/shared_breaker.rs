//! [`SharedBreakerStore`] on Redis: the state of every circuit breaker of a
//! fleet in two small hashes per breaker, each operation one EVALSHA of
//! `lua/breaker.lua` (server time, epochs, the fleet-wide probe quota; see
//! the script's header), with the backend's call timeout and health.
//!
//! Transitions are also announced on the channel
//! [`keys::breaker_channel`](crate::keys::breaker_channel) for operators
//! (`redis-cli SUBSCRIBE`); instances do not need it, they read the state.

use crate::backend::RedisBackend;
use crate::keys::{breaker_channel, BreakerKeys};
use crate::scripts;
use futures::future::BoxFuture;
use futures::FutureExt;
use pressure_core::shared_breaker::{
    CircuitRules, OutcomeCounts, ProbeGrant, ProbeOutcome, SharedBreakerStore, SharedCircuit, SharedState,
};
use pressure_core::BackendError;
use std::time::Duration;

/// What the script is asked to do, with its own arguments.
enum Op {
    Read,
    Record(OutcomeCounts),
    Open { seen_epoch: u64, open_for_ms: u64 },
    Probe,
    Report { epoch: u64, outcome: ProbeOutcome },
}

/// Rules of a read, which applies none.
const NO_RULES: CircuitRules = CircuitRules {
    window_ms: 1,
    bucket_ms: 1,
    minimum_calls: 1,
    failure_rate_threshold: 1.0,
    slow_call_rate_threshold: 1.0,
    open_wait_ms: 1,
    half_open_probes: 1,
};

impl RedisBackend {
    /// Runs `op` on breaker `name`: `(state, granted)`.
    async fn breaker_op(
        &self,
        name: &str,
        rules: &CircuitRules,
        op: Op,
    ) -> Result<(SharedCircuit, bool), BackendError> {
        let prefix = &self.store.config.key_prefix;
        let keys = BreakerKeys::new(prefix, name);
        let mut inv = scripts::BREAKER.prepare_invoke();
        inv.key(&keys.state).key(&keys.window);
        let op_name = match op {
            Op::Read => "read",
            Op::Record(_) => "record",
            Op::Open { .. } => "open",
            Op::Probe => "probe",
            Op::Report { .. } => "report",
        };
        inv.arg(op_name)
            .arg(rules.window_ms.max(1))
            .arg(rules.bucket_ms.max(1))
            .arg(rules.minimum_calls.max(1))
            .arg(rules.failure_rate_threshold)
            .arg(rules.slow_call_rate_threshold)
            .arg(rules.open_wait_ms.max(1))
            .arg(rules.half_open_probes.max(1))
            .arg(breaker_channel(prefix))
            .arg(name);
        match op {
            Op::Read | Op::Probe => {}
            Op::Record(c) => {
                inv.arg(c.calls).arg(c.failures).arg(c.slow);
            }
            Op::Open {
                seen_epoch,
                open_for_ms,
            } => {
                inv.arg(seen_epoch).arg(open_for_ms.max(1));
            }
            Op::Report { epoch, outcome } => {
                let code = match outcome {
                    ProbeOutcome::Success => "s",
                    ProbeOutcome::Failure => "f",
                    ProbeOutcome::Released => "r",
                };
                inv.arg(epoch).arg(code);
            }
        }
        let v: Vec<i64> = self.store.call(&keys.state, inv).await?;
        let [state, epoch, retry_ms, granted_probes, granted] = v[..] else {
            return Err(BackendError::Protocol(format!("breaker.lua returned {v:?}")));
        };
        let state = match state {
            0 => SharedState::Closed,
            1 => SharedState::Open,
            2 => SharedState::HalfOpen,
            other => return Err(BackendError::Protocol(format!("breaker.lua state {other}"))),
        };
        let circuit = SharedCircuit {
            state,
            epoch: epoch.max(0) as u64,
            retry_in: Duration::from_millis(retry_ms.max(0) as u64),
            probes_granted: u32::try_from(granted_probes.max(0)).unwrap_or(u32::MAX),
        };
        Ok((circuit, granted == 1))
    }
}

impl SharedBreakerStore for RedisBackend {
    fn read<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        async move { Ok(self.breaker_op(name, &NO_RULES, Op::Read).await?.0) }.boxed()
    }

    fn record<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
        counts: OutcomeCounts,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        async move { Ok(self.breaker_op(name, rules, Op::Record(counts)).await?.0) }.boxed()
    }

    fn open<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
        seen_epoch: u64,
        open_for: Duration,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        let open_for_ms = u64::try_from(open_for.as_millis()).unwrap_or(u64::MAX);
        async move {
            let op = Op::Open {
                seen_epoch,
                open_for_ms,
            };
            Ok(self.breaker_op(name, rules, op).await?.0)
        }
        .boxed()
    }

    fn acquire_probe<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
    ) -> BoxFuture<'a, Result<ProbeGrant, BackendError>> {
        async move {
            let (circuit, granted) = self.breaker_op(name, rules, Op::Probe).await?;
            Ok(if granted {
                ProbeGrant::Granted { epoch: circuit.epoch }
            } else {
                ProbeGrant::Refused(circuit)
            })
        }
        .boxed()
    }

    fn report_probe<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
        epoch: u64,
        outcome: ProbeOutcome,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        async move {
            Ok(self
                .breaker_op(name, rules, Op::Report { epoch, outcome })
                .await?
                .0)
        }
        .boxed()
    }
}
