//! The chaos driver.
