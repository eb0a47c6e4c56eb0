//! The store calls of quota leasing (`lua/lease.lua`): taking a lease as a
//! settled call (a batch whose caller went away is given back whole) and
//! giving one back in the background.
//!
//! A lease call answers for its first unit in the acquire script's reply
//! shape, so the backend decides it as any acquisition: leasing needs the
//! store, never the backend.

use super::{Book, Held};
use crate::keys::member;
use crate::scripts::{self, reply_u64};
use crate::store::{Failure, Store};
use pressure_core::clock::Clock;
use pressure_core::BackendError;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A lease call about to be made; while it lives, the book's other
/// decisions go to the store (dropping it, done or not, ends that).
pub(crate) struct Refill<'a> {
    book: &'a Book,
    old: Option<Held>,
    want: u64,
}

impl<'a> Refill<'a> {
    pub(super) fn new(book: &'a Book, old: Option<Held>, want: u64) -> Self {
        Self { book, old, want }
    }

    /// Gives the spent lease back and takes a new one of up to `want`
    /// units in one call. Its first unit answers the caller's demand, as
    /// the acquire script's reply would (`[1, at_us, 0]` granted, `[0,
    /// wait_us, dimension]` denied) for the backend to decide on.
    pub(crate) async fn run(self, store: &Arc<Store>) -> Result<[i64; 3], Failure> {
        let book = self.book;
        let id = rand::random::<u64>();
        let sent_ns = store.clock.now_nanos();
        let args = book.args_for(self.want, id, self.old.as_ref());
        store.leasing.calls.fetch_add(1, Ordering::Relaxed);
        let call = {
            let (store, key) = (Arc::clone(store), book.key.clone());
            async move {
                store
                    .call_untimed::<Vec<i64>>(&key, invocation(&key, &args))
                    .await
            }
        };
        let orphan = {
            let (store, key, args) = (Arc::clone(store), book.key.clone(), book.args.clone());
            move |answer: Option<Result<Vec<i64>, Failure>>| {
                // A batch taken for a caller that went away goes back whole;
                // a single unit stays counted (the safe side).
                if let Some(Ok(v)) = answer {
                    if let [1, _, units, dated] = v[..] {
                        if units > 1 {
                            store.cancel_releases.fetch_add(1, Ordering::Relaxed);
                            let held = Held {
                                id,
                                left: reply_u64(units),
                                dated_us: reply_u64(dated),
                                deadline_ns: 0,
                                server_at_ns: 0,
                                local_at_ns: 0,
                            };
                            spawn_give_back(store, key, &args, held);
                        }
                    }
                }
            }
        };
        let v = match store.call_settled(&book.key, call, orphan).await {
            Ok(v) => v,
            Err(f) => {
                if let (false, Some(old)) = (f.sent, self.old) {
                    book.give_back(old);
                }
                return Err(f);
            }
        };
        match v[..] {
            [1, at_us, units, dated] => {
                if units > 1 {
                    book.install(Held {
                        id,
                        left: reply_u64(units) - 1,
                        dated_us: reply_u64(dated),
                        deadline_ns: sent_ns.saturating_add(book.ttl_ns),
                        server_at_ns: reply_u64(at_us).saturating_mul(1_000),
                        local_at_ns: store.clock.now_nanos(),
                    });
                }
                Ok([1, at_us, 0])
            }
            [0, wait, dim, _] => Ok([0, wait, dim]),
            _ => Err(Failure {
                error: BackendError::Protocol(format!("lease returned {v:?}")),
                sent: true,
                owned: false,
            }),
        }
    }
}

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        self.book.state.lock().refilling = false;
    }
}

impl Book {
    /// `lua/lease.lua`'s ARGV: take `want` units as lease `id`, ending `old`.
    fn args_for(&self, want: u64, id: u64, old: Option<&Held>) -> Vec<String> {
        lease_args(&self.args, want, self.cap, self.ttl_ns, id, old)
    }

    /// Gives `held` back in the background (its record leaves the budget,
    /// its unused units the counts); without a runtime its record expires
    /// by itself and its units stay counted until their window passes.
    pub(super) fn give_back(&self, held: Held) {
        spawn_give_back(Arc::clone(&self.store), self.key.clone(), &self.args, held);
    }
}

fn spawn_give_back(store: Arc<Store>, key: String, base: &[String], held: Held) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let args = lease_args(base, 0, 0, 0, 0, Some(&held));
    store.leasing.calls.fetch_add(1, Ordering::Relaxed);
    rt.spawn(async move {
        let _ = store.call::<Vec<i64>>(&key, invocation(&key, &args)).await;
    });
}

fn lease_args(base: &[String], want: u64, cap: u64, ttl_ns: u64, id: u64, old: Option<&Held>) -> Vec<String> {
    let mut out = Vec::with_capacity(base.len() + 8);
    out.push(base.len().to_string());
    out.extend(base.iter().cloned());
    out.push(want.to_string());
    out.push(cap.to_string());
    out.push((ttl_ns / 1_000).to_string());
    out.push(member(id));
    match old {
        Some(o) => {
            out.push(member(o.id));
            out.push(o.left.to_string());
            out.push(o.dated_us.to_string());
        }
        None => out.extend(["-".to_owned(), "0".to_owned(), "0".to_owned()]),
    }
    out
}

fn invocation(key: &str, args: &[String]) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::LEASE.prepare_invoke();
    inv.key(key);
    for a in args {
        inv.arg(a);
    }
    inv
}
