//! Micro-benchmarks of the store's hot paths through its public API: history key encoding, MVCC
//! puts (in-memory engine and RocksDB without sync, one put per applied batch and 100 per batch),
//! ranges (one key, a 100-key prefix page) and watch dispatch (a revision published to one of
//! 10,000 watchers, and to 1,000 watchers of one key).
//!
//! `cargo bench -p keel-store --bench mvcc` (or `cargo bench --workspace --bench mvcc`). Keys are
//! keel-bench's: 8-byte zero-padded decimal; values 256 bytes.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use futures::{FutureExt, StreamExt};
use keel_proto::etcdserverpb::{PutRequest, RangeRequest, WatchCreateRequest};
use keel_proto::mvccpb::{event::EventType, Event, KeyValue};
use keel_store::engine::{Engine, MemEngine, RocksEngine};
use keel_store::mvcc::keys::{decode_rev_key, rev_key, Rev};
use keel_store::mvcc::{kv, Mvcc, Revision};
use keel_store::watch::Hub;

fn key(n: u64) -> Vec<u8> {
    format!("{n:08}").into_bytes()
}

const VALUE: [u8; 256] = [7; 256];

/// A store on `engine` holding keys 0..n.
fn filled(engine: Arc<dyn Engine>, n: u64) -> Mvcc {
    let mvcc = Mvcc::open(engine).expect("open");
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut batch = mvcc.apply(false);
        for &i in chunk {
            kv::put(&mut batch, &PutRequest { key: key(i).into(), value: VALUE.to_vec().into(), ..Default::default() })
                .expect("put");
        }
        batch.commit(false).expect("commit");
    }
    mvcc
}

fn key_encoding(c: &mut Criterion) {
    let mut g = c.benchmark_group("keys");
    g.bench_function("rev_key", |b| {
        let mut main = 0i64;
        b.iter(|| {
            main += 1;
            black_box(rev_key(Rev::new(main, 3), false))
        })
    });
    let encoded = rev_key(Rev::new(123_456_789, 2), true);
    g.bench_function("decode_rev_key", |b| b.iter(|| black_box(decode_rev_key(black_box(&encoded)).expect("valid"))));
    g.finish();
}

fn puts(c: &mut Criterion) {
    let mut g = c.benchmark_group("mvcc_put");
    let dir = tempfile::tempdir().expect("temp dir");
    let engines: [(&str, Arc<dyn Engine>); 2] = [
        ("mem", Arc::new(MemEngine::new())),
        ("rocks", Arc::new(RocksEngine::open(dir.path()).expect("open rocksdb"))),
    ];
    for (name, engine) in engines {
        let mvcc = filled(engine, 10_000);
        for per_batch in [1u64, 100] {
            g.throughput(Throughput::Elements(per_batch));
            let mut n = 0u64;
            g.bench_function(BenchmarkId::new(name, format!("{per_batch}_per_batch")), |b| {
                b.iter(|| {
                    let mut batch = mvcc.apply(false);
                    for _ in 0..per_batch {
                        n += 1;
                        let req = PutRequest {
                            key: key(n % 100_000).into(),
                            value: VALUE.to_vec().into(),
                            ..Default::default()
                        };
                        kv::put(&mut batch, &req).expect("put");
                    }
                    black_box(batch.commit(false).expect("commit"))
                })
            });
        }
    }
    g.finish();
}

fn ranges(c: &mut Criterion) {
    let mut g = c.benchmark_group("mvcc_range");
    let mvcc = filled(Arc::new(MemEngine::new()), 100_000);
    let mut n = 0u64;
    g.bench_function("one_key_of_100k", |b| {
        b.iter(|| {
            n = (n + 7919) % 100_000;
            let req = RangeRequest { key: key(n).into(), ..Default::default() };
            black_box(kv::range(&mvcc.read(), &req).expect("range"))
        })
    });
    g.bench_function("prefix_page_50_of_100", |b| {
        b.iter(|| {
            n = (n + 7919) % 100_000;
            let prefix = &key(n)[..6];
            let mut end = prefix.to_vec();
            *end.last_mut().expect("non-empty") += 1;
            let req =
                RangeRequest { key: prefix.to_vec().into(), range_end: end.into(), limit: 50, ..Default::default() };
            black_box(kv::range(&mvcc.read(), &req).expect("range"))
        })
    });
    g.finish();
}

/// A hub with `watchers` watchers on one stream, watcher i on key `i % keys`.
fn hub(watchers: u64, keys: u64) -> (Arc<Hub>, keel_store::watch::Responses) {
    let mvcc = Arc::new(Mvcc::open(Arc::new(MemEngine::new())).expect("open"));
    let hub = Arc::new(Hub::new(mvcc));
    let (stream, _outbox, mut responses) = hub.open_stream();
    for i in 0..watchers {
        hub.create(stream, &WatchCreateRequest { key: key(i % keys).into(), ..Default::default() });
    }
    while responses.next().now_or_never().flatten().is_some() {}
    (hub, responses)
}

fn watch_dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("watch_publish");
    for (name, watchers, keys) in [("one_of_10k_watchers", 10_000u64, 10_000u64), ("1k_watchers_one_key", 1_000, 1)] {
        let (hub, mut responses) = hub(watchers, keys);
        let mut rev = 1i64;
        g.throughput(Throughput::Elements(watchers / keys));
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    rev += 1;
                    let kv = KeyValue {
                        key: key(rev as u64 % keys).into(),
                        value: VALUE.to_vec().into(),
                        mod_revision: rev,
                        ..Default::default()
                    };
                    Revision {
                        rev,
                        events: vec![Event { r#type: EventType::Put as i32, kv: Some(kv), prev_kv: None }],
                        prev_known: false,
                    }
                },
                |r| {
                    hub.publish(std::slice::from_ref(&r));
                    let mut got = 0;
                    while responses.next().now_or_never().flatten().is_some() {
                        got += 1;
                    }
                    black_box(got)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, key_encoding, puts, ranges, watch_dispatch);
criterion_main!(benches);
