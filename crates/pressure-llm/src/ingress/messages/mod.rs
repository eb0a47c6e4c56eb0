//! Anthropic Messages ingress (to be written).
