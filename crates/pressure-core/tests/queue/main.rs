//! queue+execute on paused tokio time: order, the starvation rule, bounds,
//! deadlines, cancellation, rate-limit retries and reconcile.

#[path = "../support.rs"]
mod support;

use parking_lot::Mutex;
use pressure_core::{
    AcquireOptions, Attempt, Limits, Priority, QueueConfig, QueueError, Request, Reserved, ResourceConfig,
    TaskError,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn one_at_a_time(queue: QueueConfig) -> ResourceConfig {
    ResourceConfig::new(Limits::default().max_concurrent_requests(1)).queue(queue)
}

/// Queues `labels` (with priorities) behind a holder, releases it, and
/// returns the order in which the tasks ran.
async fn run_order(queue: QueueConfig, labels: &[(&'static str, Priority)]) -> Vec<&'static str> {
    let b = support::paused_broker();
    b.register("r", one_at_a_time(queue)).expect("valid");
    let holder = b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers")
        .into_permit()
        .expect("granted");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for &(label, prio) in labels {
        let (b, order) = (b.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            b.enqueue(
                Request::new("r", move |_| {
                    let order = order.clone();
                    async move {
                        order.lock().push(label);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Ok::<_, TaskError<()>>(())
                    }
                })
                .priority(prio),
            )
            .await
            .expect("served");
        }));
        // Let each one join the queue in this order.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        b.resource_stats("r").await.expect("registered").queued,
        Some(labels.len() as u64)
    );
    drop(holder);
    for t in tasks {
        t.await.expect("task");
    }
    let v = order.lock().clone();
    v
}

#[tokio::test(start_paused = true)]
async fn interactive_goes_before_batch() {
    use Priority::*;
    let order = run_order(
        QueueConfig {
            interactive_burst: 100,
            ..QueueConfig::default()
        },
        &[
            ("b1", Batch),
            ("b2", Batch),
            ("i1", Interactive),
            ("i2", Interactive),
        ],
    )
    .await;
    assert_eq!(order, vec!["i1", "i2", "b1", "b2"]);
}

#[tokio::test(start_paused = true)]
async fn batch_goes_after_interactive_burst() {
    use Priority::*;
    let mut labels = vec![("b1", Batch), ("b2", Batch)];
    labels.extend([
        ("i1", Interactive),
        ("i2", Interactive),
        ("i3", Interactive),
        ("i4", Interactive),
        ("i5", Interactive),
        ("i6", Interactive),
    ]);
    let order = run_order(
        QueueConfig {
            interactive_burst: 2,
            ..QueueConfig::default()
        },
        &labels,
    )
    .await;
    assert_eq!(order, vec!["i1", "i2", "b1", "i3", "i4", "b2", "i5", "i6"]);
}

#[tokio::test(start_paused = true)]
async fn full_queue_fails_fast() {
    let b = support::paused_broker();
    b.register(
        "r",
        one_at_a_time(QueueConfig {
            max_queued: 2,
            ..QueueConfig::default()
        }),
    )
    .expect("valid");
    let _holder = b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers");
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let b = b.clone();
        waiting.push(tokio::spawn(async move {
            b.enqueue(Request::new("r", |_| async { Ok::<_, TaskError<()>>(()) }))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let t0 = Instant::now();
    let r = b
        .enqueue(Request::new("r", |_| async { Ok::<_, TaskError<()>>(()) }))
        .await;
    assert!(matches!(r, Err(QueueError::Full { max_queued: 2, .. })), "{r:?}");
    assert_eq!(t0.elapsed(), Duration::ZERO);
    for w in waiting {
        w.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn max_wait_times_out_and_leaves_nothing() {
    let b = support::paused_broker();
    b.register("r", one_at_a_time(QueueConfig::default()))
        .expect("valid");
    let _holder = b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers");
    let t0 = Instant::now();
    let r = b
        .enqueue(
            Request::new("r", |_| async { Ok::<_, TaskError<()>>(()) }).max_wait(Duration::from_millis(250)),
        )
        .await;
    assert!(matches!(r, Err(QueueError::Timeout { .. })), "{r:?}");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(300),
        "{waited:?}"
    );
    let s = b.resource_stats("r").await.expect("registered");
    assert_eq!(s.queued, Some(0));
    assert_eq!(s.denied, 1);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_cannot_be_met_fails_at_once() {
    let b = support::paused_broker();
    b.register("r", ResourceConfig::new(Limits::default().requests_per_minute(1)))
        .expect("valid");
    b.enqueue(Request::new("r", |_| async { Ok::<_, TaskError<()>>(()) }))
        .await
        .expect("first fits");
    let t0 = Instant::now();
    let r = b
        .enqueue(Request::new("r", |_| async { Ok::<_, TaskError<()>>(()) }).max_wait(Duration::from_secs(5)))
        .await;
    assert!(matches!(r, Err(QueueError::Timeout { .. })), "{r:?}");
    assert!(
        t0.elapsed() < Duration::from_millis(10),
        "waited {:?}",
        t0.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_an_enqueue_leaves_no_trace() {
    let b = support::paused_broker();
    b.register("r", one_at_a_time(QueueConfig::default()))
        .expect("valid");
    let holder = b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers")
        .into_permit()
        .expect("granted");
    let ran = Arc::new(Mutex::new(0));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (b, ran) = (b.clone(), ran.clone());
        tasks.push(tokio::spawn(async move {
            b.enqueue(Request::new("r", move |_| {
                let ran = ran.clone();
                async move {
                    *ran.lock() += 1;
                    Ok::<_, TaskError<()>>(())
                }
            }))
            .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(b.resource_stats("r").await.expect("registered").queued, Some(5));
    for t in tasks {
        t.abort();
        let _ = t.await;
    }
    let s = b.resource_stats("r").await.expect("registered");
    assert_eq!(s.queued, Some(0));
    drop(holder);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(*ran.lock(), 0, "abandoned tasks never run");
    let s = b.resource_stats("r").await.expect("registered");
    assert_eq!(s.active, Some(0));
    assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
    // The queue still serves newcomers.
    b.enqueue(Request::new("r", |_| async { Ok::<_, TaskError<()>>(()) }))
        .await
        .expect("served");
}

#[tokio::test(start_paused = true)]
async fn rate_limited_task_is_retried_after_retry_after() {
    let b = support::paused_broker();
    b.register(
        "r",
        ResourceConfig::new(Limits::default().requests_per_second(100)),
    )
    .expect("valid");
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s2 = starts.clone();
    let t0 = Instant::now();
    let r = b
        .enqueue(Request::new("r", move |a: Attempt| {
            let starts = s2.clone();
            async move {
                starts.lock().push(Instant::now());
                if a.number == 1 {
                    Err(TaskError::RateLimited {
                        retry_after: Some(Duration::from_secs(2)),
                        error: "429",
                    })
                } else {
                    Ok(a.number)
                }
            }
        }))
        .await
        .expect("served on retry");
    assert_eq!(r.attempts, 2);
    assert_eq!(r.value, 2);
    let starts = starts.lock();
    assert_eq!(starts[0] - t0, Duration::ZERO);
    assert_eq!(starts[1] - starts[0], Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn rate_limit_retries_are_bounded() {
    let b = support::paused_broker();
    let queue = QueueConfig {
        max_rate_limit_retries: 2,
        ..QueueConfig::default()
    };
    b.register(
        "r",
        ResourceConfig::new(Limits::default().requests_per_second(100)).queue(queue),
    )
    .expect("valid");
    let r = b
        .enqueue(Request::new("r", |_| async {
            Err::<(), _>(TaskError::RateLimited {
                retry_after: None,
                error: "429",
            })
        }))
        .await;
    match r {
        Err(QueueError::RateLimited { attempts, last, .. }) => {
            assert_eq!(attempts, 3);
            assert_eq!(last, "429");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_non_rate_limit_failure_is_returned_once() {
    let b = support::paused_broker();
    b.register(
        "r",
        ResourceConfig::new(Limits::default().requests_per_second(100)),
    )
    .expect("valid");
    let calls = Arc::new(Mutex::new(0));
    let c2 = calls.clone();
    let r = b
        .enqueue(Request::new("r", move |_| {
            let calls = c2.clone();
            async move {
                *calls.lock() += 1;
                Err::<(), _>(TaskError::Failed("400 bad request"))
            }
        }))
        .await;
    assert!(matches!(r, Err(QueueError::Task("400 bad request"))));
    assert_eq!(*calls.lock(), 1);
}

#[tokio::test(start_paused = true)]
async fn reported_usage_is_reconciled() {
    let b = support::paused_broker();
    b.register(
        "r",
        ResourceConfig::new(Limits::default().tokens_per_minute(10_000)),
    )
    .expect("valid");
    b.enqueue(
        Request::new("r", |a: Attempt| async move {
            a.usage.set(Reserved {
                requests: 1,
                input_tokens: 300,
                output_tokens: 120,
                cost_micro_usd: 0,
            });
            Ok::<_, TaskError<()>>(())
        })
        .tokens(300, 4_000),
    )
    .await
    .expect("served");
    let s = b.resource_stats("r").await.expect("registered");
    assert_eq!(s.usage.get("tokensPerMinute"), Some(&420));
    assert!(s.wait_time_ms.is_some());
}

#[tokio::test(start_paused = true)]
async fn long_tasks_keep_their_lease() {
    let b = support::paused_broker();
    b.register(
        "r",
        ResourceConfig::new(
            Limits::default()
                .max_concurrent_requests(1)
                .lease_ttl(Duration::from_secs(3)),
        ),
    )
    .expect("valid");
    let b2 = b.clone();
    let long = tokio::spawn(async move {
        b2.enqueue(Request::new("r", |_| async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            Ok::<_, TaskError<()>>(())
        }))
        .await
    });
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let a = b
            .try_acquire("r", AcquireOptions::default())
            .await
            .expect("answers");
        assert!(!a.allowed(), "the running task's lease must be renewed");
    }
    long.await.expect("task").expect("served");
    assert!(b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
}
