//! A request's extension map, kept for the next request on the same server
//! thread once the request needs it no more.
//!
//! The route layer puts one request context in every request's
//! extensions. `http::Extensions` allocates its map (a box and a table)
//! on the first insert: two of a proxied request's allocations, for a map
//! that holds one or two entries. The proxy empties the map before the
//! request goes upstream (the upstream needs none of it), and a layer that
//! refuses the request at once ([`StepFuture::refuse`](super::StepFuture::refuse))
//! when it drops it; the map is left here, and the route layer gives it to
//! the next request that arrives with none of its own. Per thread: the
//! gateway's server threads each run their own runtime, so a spare map is
//! taken where it was left.

use http::Extensions;
use std::cell::RefCell;

thread_local! {
    static SPARE: RefCell<Option<Extensions>> = const { RefCell::new(None) };
}

/// Gives `req_extensions` a spare emptied map when it has none of its own
/// (a request whose server put nothing in it, most requests).
pub(crate) fn lend(req_extensions: &mut Extensions) {
    if !req_extensions.is_empty() {
        return;
    }
    if let Some(spare) = SPARE.with(|s| s.borrow_mut().take()) {
        *req_extensions = spare;
    }
}

/// Empties `extensions` (its values are dropped now) and keeps the map for
/// [`lend`], unless a spare is kept already.
pub(crate) fn give_back(mut extensions: Extensions) {
    extensions.clear();
    SPARE.with(|s| {
        let mut spare = s.borrow_mut();
        if spare.is_none() {
            *spare = Some(extensions);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Mark(u32);

    #[test]
    fn a_given_back_map_is_lent_empty_once() {
        // What the last request held (its plan, say) is let go at once.
        let plan = std::sync::Arc::new(());
        let mut used = Extensions::new();
        used.insert(Mark(1));
        used.insert(std::sync::Arc::clone(&plan));
        give_back(used);
        assert_eq!(std::sync::Arc::strong_count(&plan), 1);

        let mut fresh = Extensions::new();
        lend(&mut fresh);
        assert!(fresh.is_empty(), "the values of the last request are gone");
        fresh.insert(Mark(2));
        assert_eq!(fresh.get::<Mark>(), Some(&Mark(2)));

        // Lent once: the next request gets no spare until one is given back.
        let mut next = Extensions::new();
        lend(&mut next);
        assert!(next.is_empty());
    }

    #[test]
    fn a_request_with_extensions_of_its_own_keeps_them() {
        let mut spare = Extensions::new();
        spare.insert(Mark(9));
        give_back(spare);

        let mut own = Extensions::new();
        own.insert(Mark(3));
        lend(&mut own);
        assert_eq!(own.get::<Mark>(), Some(&Mark(3)));
        assert_eq!(own.len(), 1);
        // The spare is still there for the next one, and empty.
        let mut next = Extensions::new();
        lend(&mut next);
        assert!(next.is_empty());
    }
}
