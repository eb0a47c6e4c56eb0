//! [`PPM`]: parts per million, the scale of a share of a limit (a batch
//! caller's ceiling, a lease budget's share of N).

/// Parts per million meaning "the whole limit".
pub const PPM: u32 = 1_000_000;
