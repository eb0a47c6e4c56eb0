//! [`Layer`]: which layer of the request path decided, the label of the
//! denial counters and of the denial log's lines.

/// The layer of the request path that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Per-route / per-service limits, before authentication.
    PreAuth,
    /// Per-tenant limits, after authentication.
    Tenant,
    /// `POST /v1/acquire` on the decision listener (forward auth is
    /// counted as `pre_auth` and `tenant`, like the proxy).
    Decision,
}

impl Layer {
    /// The label value: `pre_auth`, `tenant` or `decision`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::PreAuth => "pre_auth",
            Layer::Tenant => "tenant",
            Layer::Decision => "decision",
        }
    }

    pub(super) const fn index(self) -> usize {
        match self {
            Layer::PreAuth => 0,
            Layer::Tenant => 1,
            Layer::Decision => 2,
        }
    }

    pub(super) const ALL: [Layer; 3] = [Layer::PreAuth, Layer::Tenant, Layer::Decision];
}
