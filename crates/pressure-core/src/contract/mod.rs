//! The backend contract suite: behaviour every [`Backend`] must show,
//! written once and run against each backend (feature `contract`).
//!
//! Instantiate it with [`contract_suite!`](crate::contract_suite) in a test
//! crate, passing an expression that yields a [`Harness`]. The tests use real
//! time and long windows where counts must be exact, so they hold on a
//! shared store (Redis) as well as in memory.

mod calendar;
mod cancel;
mod checks;
mod nest;
mod support;

pub use calendar::*;
pub use cancel::*;
pub use checks::*;
pub use nest::*;

use crate::clock::WallShift;
use crate::{Backend, ResourceBroker};

/// Makes brokers over the backend under test.
pub trait Harness: Send + Sync + 'static {
    /// The backend under test.
    type B: Backend;

    /// A new broker with its own backend instance (its own connections), so
    /// several brokers behave like several processes of a fleet.
    fn broker(&self) -> impl std::future::Future<Output = ResourceBroker<Self::B>> + Send;

    /// A resource id unique to this run, so tests on a shared store never
    /// see each other's state.
    fn unique(&self, name: &str) -> String;

    /// Whether brokers made by [`Harness::broker`] share one store (a fleet
    /// on Redis) or each count alone (in-memory, one per process).
    fn shared_store(&self) -> bool;

    /// A new broker whose backend's UTC wall time (the calendar
    /// dimensions' periods) is moved by the returned shift, so the calendar
    /// checks can stand before a boundary and cross it.
    fn shifted_broker(
        &self,
    ) -> impl std::future::Future<Output = (ResourceBroker<Self::B>, WallShift)> + Send;

    /// A broker over a store of its own that the cancellation checks can
    /// hold ([`StoreGate`]), so a call can be dropped while it is in
    /// flight; `None` (the default) for a backend that answers in this
    /// process and so never leaves a call in flight.
    fn gated(&self) -> impl std::future::Future<Output = Option<Gated<Self::B>>> + Send {
        async { None }
    }
}

/// A broker over a store of its own, and the gate that holds that store.
pub type Gated<B> = (ResourceBroker<B>, Box<dyn StoreGate>);

/// Holds a store's answers on command, for the cancellation checks: a call
/// made while it is held is sent and stays unanswered until [`open`].
///
/// [`open`]: StoreGate::open
pub trait StoreGate: Send + Sync {
    /// From now on the store answers nothing (a frozen server).
    fn hold(&self);
    /// The store answers again, the held calls first.
    fn open(&self);
}

/// Expands to one `#[tokio::test]` per contract check, for the harness
/// produced by `$harness` (an expression evaluated in each test).
#[macro_export]
macro_rules! contract_suite {
    ($harness:expr) => {
        $crate::contract_suite!(@tests $harness;
            multi_dimension_denial_consumes_nothing,
            hour_and_24_hour_windows_count_and_wait,
            window_counts_exactly_under_concurrency,
            gcra_counts_exactly_under_concurrency,
            window_retry_at_wait_time_succeeds,
            window_burst_wait_is_at_most_the_window,
            gcra_retry_at_wait_time_succeeds,
            gcra_wait_time_is_exact,
            concurrency_release_is_exact_and_idempotent,
            abandoned_lease_is_reclaimed_after_ttl,
            held_permits_keep_their_slots_past_the_ttl,
            reconcile_moves_usage_both_ways_window,
            reconcile_moves_usage_both_ways_gcra,
            huge_reconcile_fills_never_wraps_window,
            huge_reconcile_fills_never_wraps_gcra,
            oversized_demand_is_refused_at_once,
            unknown_resource_is_an_error,
            batch_is_confined_below_headroom,
            stress_never_over_admits,
            two_brokers_share_one_limit,
            enqueue_paces_gcra_by_booking,
            enqueue_waits_for_window_capacity,
            enqueue_waits_for_concurrency_release,
            acquisition_dropped_in_flight_leaves_nothing,
            enqueue_dropped_while_queued_leaves_nothing,
            permit_calls_dropped_in_flight_are_settled,
            calendar_day_admits_exactly_n_then_waits_for_midnight,
            calendar_boundaries_reset_day_and_month_ends,
            calendar_reconcile_and_cost_units,
            calendar_reconcile_after_the_boundary_leaves_the_new_period,
            calendar_and_sliding_dimensions_are_all_or_nothing,
            nest_denial_on_one_level_charges_no_level,
            nest_permits_hold_and_release_leases_on_every_level,
            nest_reconcile_and_refund_per_level,
            nest_concurrent_never_overspends_and_never_refuses_with_room,
            nest_of_one_is_try_acquire,
            nest_dropped_in_flight_leaves_nothing,
        );
    };
    (@tests $harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let h = $harness;
                $crate::contract::$name(&h).await;
            }
        )*
    };
}
