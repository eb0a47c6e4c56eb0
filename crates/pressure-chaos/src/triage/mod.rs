//! The triage example.
