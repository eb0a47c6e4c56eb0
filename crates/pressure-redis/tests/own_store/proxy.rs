//! A small TCP proxy on loopback in front of a Redis, to make the store slow
//! or cut on demand: client-to-server bytes wait a switchable delay before
//! they are forwarded (so a script runs in Redis after its caller gave up),
//! and `cut` closes every proxied connection with whatever it still holds.

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The proxy; stopped (listener and connections) on drop.
pub struct Proxy {
    /// The loopback port clients connect to.
    pub port: u16,
    delay_ms: Arc<AtomicU64>,
    pumps: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let pumps: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (delay_ms, pumps) = (delay_ms.clone(), pumps.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        continue;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let delay = delay_ms.clone();
                    let up = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let d = delay.load(Ordering::Relaxed);
                            if d > 0 {
                                tokio::time::sleep(Duration::from_millis(d)).await;
                            }
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    let down = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    });
                    let mut p = pumps.lock().expect("pumps");
                    p.push(up);
                    p.push(down);
                }
            })
        };
        Self {
            port,
            delay_ms,
            pumps,
            accept,
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every later client-to-server chunk by `d`.
    pub fn set_delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::Relaxed);
    }

    /// Closes every proxied connection now; bytes still held are lost.
    pub fn cut(&self) {
        for p in self.pumps.lock().expect("pumps").drain(..) {
            p.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
