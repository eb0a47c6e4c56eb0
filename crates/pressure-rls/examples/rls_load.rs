//! Sends `N` sequential `ShouldRateLimit` calls on one connection and
//! prints how they were answered: the load generator of
//! `benches/callgrind-rls.sh` (the server is the measured process).
//!
//! `cargo run --release -p pressure-rls --example rls_load -- URL DOMAIN KEY VALUE N`

use pressure_rls::proto::{Code, RateLimitDescriptor, RateLimitRequest};
use pressure_rls::RateLimitClient;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, domain, key, value, n] = args.as_slice() else {
        return Err("usage: rls_load URL DOMAIN KEY VALUE N".into());
    };
    let n: u64 = n.parse()?;
    let mut client = RateLimitClient::connect(url.clone()).await?;
    let req = RateLimitRequest {
        domain: domain.clone(),
        descriptors: vec![RateLimitDescriptor::of([(key.as_str(), value.as_str())])],
        hits_addend: 0,
    };
    let (mut ok, mut over) = (0u64, 0u64);
    for _ in 0..n {
        match Code::try_from(client.should_rate_limit(req.clone()).await?.overall_code) {
            Ok(Code::Ok) => ok += 1,
            _ => over += 1,
        }
    }
    println!("{ok}×OK {over}×OVER_LIMIT");
    Ok(())
}
