//! The provider gateway's cost, in process: the same requests to a local
//! upstream playing Anthropic's Messages API, straight and through
//! `cryod::gateway`, interleaved so both meet the same noise.
//!
//! - added latency per request: p50 and p99 of each path, and their gaps;
//! - throughput with `streams` concurrent streamed answers of `mib` MiB;
//! - memory per open stream: the process's RSS with `open` answers held
//!   open straight, then through the gateway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;

use crate::measure::{Figures, stats};

/// One SSE event of the scripted answer (about 1 KiB with its text).
fn event(i: usize) -> String {
    format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}{i}\"}}}}\n\n",
        "x".repeat(960)
    )
}

const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m1\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n";
const END: &str = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// The upstream: `?events=N` streams N events after the start; `?hold`
/// sends the start and keeps the answer open until the process ends.
async fn upstream() -> String {
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
        let q = req.uri().query().unwrap_or("").to_string();
        let events: usize =
            q.split('&').find_map(|kv| kv.strip_prefix("events=")).and_then(|n| n.parse().ok()).unwrap_or(0);
        let hold = q.contains("hold");
        let stream = futures_util::stream::unfold(0usize, move |i| async move {
            let chunk = match i {
                0 => START.to_string(),
                _ if hold => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return None;
                }
                i if i <= events => event(i),
                i if i == events + 1 => END.to_string(),
                _ => return None,
            };
            Some((Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(chunk)), i + 1))
        });
        Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The memory each of `open` answers held open costs, straight and through
/// the gateway (KiB each).
async fn held_open(client: &reqwest::Client, bases: [String; 2], open: usize) -> Vec<f64> {
    let mut per = Vec::new();
    for base in bases {
        let before = rss_kb();
        let mut held = Vec::with_capacity(open);
        for _ in 0..open {
            let r = client
                .post(format!("{base}/v1/messages?hold"))
                .header("x-api-key", "k")
                .body("{}")
                .send()
                .await
                .unwrap();
            held.push(r);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        per.push((rss_kb() - before) / open as f64);
        drop(held);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    per
}

fn rss_kb() -> f64 {
    crate::measure::rss_mb(std::process::id()) * 1024.0
}

pub fn gateway(requests: usize, streams: usize, mib: usize, open: usize) -> Figures {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let up = upstream().await;
        let g = cryod::gateway::Gateway::new(cryod::base::clock::Clock::system());
        g.serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), tokio_util::sync::CancellationToken::new())
            .await
            .unwrap();
        let tell = cryod::gateway::Tell {
            limit: Arc::new(|_| {}),
            hold: Arc::new(|_, _| {}),
            over: Arc::new(|| {}),
            alive: Arc::new(|| {}),
            answered: Arc::new(|_| {}),
        };
        let spec = cryod::gateway::Spec {
            chamber: "bench".into(),
            account: "bench".into(),
            session: 1,
            upstream: up.clone(),
            auth: cryo_session::Auth::ApiKey("sk-bench".into()),
            line: None,
            prices: Arc::new(cryo_session::Prices::default()),
            tell,
            trace: None,
            kept: None,
        };
        let ticket = g.open(spec).unwrap();
        let through = ticket.base();
        let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap();
        let call = |base: String, query: String| {
            let client = client.clone();
            async move {
                let r = client
                    .post(format!("{base}/v1/messages{query}"))
                    .header("x-api-key", "k")
                    .body(r#"{"model":"m1","stream":true,"messages":[]}"#)
                    .send()
                    .await
                    .unwrap();
                let mut body = r.bytes_stream();
                let mut n = 0usize;
                while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
                    n += chunk.unwrap().len();
                }
                n
            }
        };
        let mut f = Figures::new();
        println!("gateway: {requests} requests each way, {streams} streams of {mib} MiB, {open} open streams");
        // Latency: one short streamed answer, straight then through, in turn.
        for _ in 0..50 {
            call(up.clone(), String::new()).await;
            call(through.clone(), String::new()).await;
        }
        let (mut direct, mut gw) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
        for _ in 0..requests {
            let t = Instant::now();
            call(up.clone(), String::new()).await;
            direct.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            call(through.clone(), String::new()).await;
            gw.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let ((d50, d99), (g50, g99)) = (stats(direct), stats(gw));
        println!("  straight                        p50 {d50:.3} ms, p99 {d99:.3} ms");
        println!("  through the gateway             p50 {g50:.3} ms, p99 {g99:.3} ms");
        println!("  added by the gateway            p50 {:.3} ms, p99 {:.3} ms", g50 - d50, g99 - d99);
        for (k, v) in [("direct_p50_ms", d50), ("direct_p99_ms", d99), ("gateway_p50_ms", g50), ("gateway_p99_ms", g99)]
        {
            f.insert(k.into(), v.into());
        }
        f.insert("added_p50_ms".into(), (g50 - d50).into());
        f.insert("added_p99_ms".into(), (g99 - d99).into());
        // Throughput: `streams` answers of `mib` MiB at once.
        let events = mib * 1024;
        for (name, base) in [("straight", up.clone()), ("through the gateway", through.clone())] {
            let t = Instant::now();
            let all: Vec<_> =
                (0..streams).map(|_| tokio::spawn(call(base.clone(), format!("?events={events}")))).collect();
            let mut bytes = 0usize;
            for h in all {
                bytes += h.await.unwrap();
            }
            let secs = t.elapsed().as_secs_f64();
            let mbs = bytes as f64 / 1e6 / secs;
            println!("  {streams} streams {name:<22} {mbs:.0} MB/s ({:.1} MB in {secs:.2} s)", bytes as f64 / 1e6);
            f.insert(format!("{}_mb_per_s", if name == "straight" { "direct" } else { "gateway" }), mbs.into());
        }
        let counted = ticket.route().used();
        assert_eq!(
            counted.requests as usize,
            50 + requests + streams,
            "every answer through it was counted: {counted:?}"
        );
        // Memory: `open` answers held open, straight, then through.
        let per = held_open(&client, [up.clone(), through.clone()], open).await;
        let gw_kb = (per[1] - per[0]).max(0.0);
        println!(
            "  memory per open stream          {:.1} KiB straight, {:.1} KiB through: the gateway adds {gw_kb:.1} KiB",
            per[0], per[1]
        );
        f.insert("gateway_kib_per_open_stream".into(), gw_kb.into());
        f
    })
}
