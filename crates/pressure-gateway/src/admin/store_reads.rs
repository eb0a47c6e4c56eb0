//! Reading a few resources' usage from the store for the operator's pages
//! (the summary, the hierarchy, `/metrics`): bounded reads at once, so a
//! page never fires one read per tenant in a burst.

use super::AdminState;
use futures::StreamExt;
use pressure_core::ResourceStats;

/// Store reads of one summary run at once.
const READS_AT_ONCE: usize = 16;

/// `list` with each resource's usage read from the store, in the same order;
/// a resource removed meanwhile (or a failed read) keeps its local numbers.
pub(super) async fn with_usage(state: &AdminState, list: Vec<ResourceStats>) -> Vec<ResourceStats> {
    futures::stream::iter(list)
        .map(|local| async move {
            match state.broker.resource_stats(&local.resource).await {
                Ok(read) => read,
                Err(_) => local,
            }
        })
        .buffered(READS_AT_ONCE)
        .collect()
        .await
}
