//! The Node.js binding's test suites (`bindings/node`, and the Fastify
//! example on top of it) run by `cargo test`: this test installs the npm
//! packages from their lockfiles, puts the addon this `cargo test` built
//! (pressure-node is a dev-dependency of this package) where `index.js`
//! loads it, starts a Redis and a Redis Cluster (`pressure-testkit`) and
//! runs `npm test` with `PRESSURE_TEST_REDIS_URL`,
//! `PRESSURE_TEST_REDIS_CLUSTER_URL` and `PRESSURE_BIN` (this build's
//! `pressure` binary) set.
//!
//! Without `node` (20 or later) and `npm` on `PATH` the tests skip, and fail
//! when `PRESSURE_REQUIRE_NODE=1`.

mod support;

use support::{node_tools, npm, Step};

#[test]
fn bindings_node_npm_test_passes() {
    let test = "bindings_node::bindings_node_npm_test_passes";
    if let Err(why) = node_tools() {
        pressure_testkit::skip(test, "PRESSURE_REQUIRE_NODE", &why);
        return;
    }
    let pkg = support::binding();
    npm(&pkg, &["test"], Step::Test);
}

#[test]
fn fastify_example_npm_test_passes() {
    let test = "bindings_node::fastify_example_npm_test_passes";
    if let Err(why) = node_tools() {
        pressure_testkit::skip(test, "PRESSURE_REQUIRE_NODE", &why);
        return;
    }
    // The example depends on the binding by `file:`; the addon must exist.
    support::binding();
    let example = support::workspace().join("examples/fastify");
    npm(&example, &["ci", "--no-audit", "--no-fund"], Step::Install);
    npm(&example, &["test"], Step::Test);
}
