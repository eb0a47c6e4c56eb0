//! Who may call: the checks of a caller's credentials that more than one
//! listener makes.
//!
//! * [`token`] — a listener's own shared secret (the admin token, the
//!   decision listener's service token), compared in constant time.

pub(crate) mod token;
