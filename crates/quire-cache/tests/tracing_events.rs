//! The `tracing` feature: the slow paths emit events — direct reclaim, a write-back error
//! recorded, a writer throttled at the dirty limit, a write refused there — with their fields.
//! Run with `cargo test -p quire-cache --features tracing --test tracing_events`.
#![cfg(feature = "tracing")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire::filemap::{CacheConfig, FilemapError, PageCache};
use quire::store::{Fault, MemStore, Store};
use quire::vmscan::ReclaimPolicy;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One event as seen: level, target, and its fields as `name=value` (the message first).
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    target: String,
    fields: Vec<String>,
}

impl Seen {
    fn message(&self) -> &str {
        self.fields[0].strip_prefix("message=").unwrap_or("")
    }
}

/// A subscriber that keeps every event (the library's background threads included).
struct Keep(Arc<Mutex<Vec<Seen>>>);

struct Fields(Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let s = format!("{}={value:?}", field.name());
        if field.name() == "message" {
            self.0.insert(0, s);
        } else {
            self.0.push(s);
        }
    }
}

impl Subscriber for Keep {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut f = Fields(Vec::new());
        event.record(&mut f);
        self.0.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            fields: f.0,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The events seen so far whose message starts with `prefix`.
fn seen(log: &Mutex<Vec<Seen>>, prefix: &str) -> Vec<Seen> {
    let log = log.lock().unwrap();
    log.iter()
        .filter(|s| s.message().starts_with(prefix))
        .cloned()
        .collect()
}

/// A store whose writes take a while, so that writers outrun write-back.
struct Slow(MemStore);

impl Store for Slow {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> quire::store::Result<usize> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> quire::store::Result<usize> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.write_at(offset, buf)
    }
    fn sync(&self) -> quire::store::Result<()> {
        self.0.sync()
    }
    fn len(&self) -> quire::store::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> quire::store::Result<()> {
        self.0.set_len(len)
    }
}

#[test]
fn slow_paths_emit_events() {
    let log = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::set_global_default(Keep(log.clone())).unwrap();

    // A write-back error: a warning with the file and the error.
    let store = common::faulty(Vec::new(), 1);
    store.add(Fault::write_error(0..1 << 20));
    let cache = PageCache::new(common::quiet_config(4 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    f.write_all_at(0, &[1; 8192]).unwrap();
    assert!(matches!(f.fsync(), Err(FilemapError::Writeback { .. })));
    let e = seen(&log, "write-back error recorded");
    assert!(!e.is_empty(), "{:?}", log.lock().unwrap());
    assert_eq!(e[0].level, Level::WARN);
    assert_eq!(e[0].target, "quire::filemap::mapping");
    assert!(
        e[0].fields
            .iter()
            .any(|f| f.starts_with("error=write at offset")),
        "{e:?}"
    );
    drop(f);
    drop(cache);

    // Direct reclaim: the clock policy reclaims in the allocating thread.
    let mut cfg = CacheConfig::new(1 << 20);
    cfg.reclaim = ReclaimPolicy::Clock;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(MemStore::from_vec(vec![3; 4 << 20])).unwrap();
    let mut buf = vec![0; 64 << 10];
    for off in (0..4 << 20).step_by(buf.len()) {
        f.read_exact_at(off, &mut buf).unwrap();
    }
    let e = seen(&log, "direct reclaim");
    assert!(!e.is_empty(), "no direct reclaim event");
    assert_eq!(e[0].level, Level::DEBUG);
    assert_eq!(e[0].target, "quire::vmscan::reclaim");
    assert!(e[0].fields.iter().any(|f| f.starts_with("order=")));
    drop(f);
    drop(cache);

    // Dirty throttling: writers outrun a slow store at a 256 KiB dirty limit.
    let mut cfg = CacheConfig::new(4 << 20);
    cfg.dirty_background = 128 << 10;
    cfg.dirty_limit = 256 << 10;
    let cache = PageCache::new(cfg.clone()).unwrap();
    let f = cache.open(Slow(MemStore::new())).unwrap();
    for i in 0..32u64 {
        f.write_all_at(i << 16, &[5; 64 << 10]).unwrap();
    }
    let e = seen(&log, "dirty throttling");
    assert!(!e.is_empty(), "no throttling event");
    assert_eq!(e[0].level, Level::DEBUG);
    assert!(e[0].fields.iter().any(|f| f == "limit_frames=64"), "{e:?}");
    drop(f);

    // A write refused at the dirty limit because the file's write-back fails.
    let store = common::faulty(Vec::new(), 1);
    store.add(Fault::write_error(0..1 << 30).persistent());
    let f = cache.open(store).unwrap();
    let refused = (0..256u64).any(|i| {
        matches!(
            f.write_at(i << 16, &[6; 64 << 10]),
            Err(FilemapError::DirtyLimit { .. })
        )
    });
    assert!(refused, "never refused");
    let e = seen(&log, "write refused at the dirty limit");
    assert!(!e.is_empty());
    assert_eq!(e[0].level, Level::WARN);
    assert!(e[0].fields.iter().any(|f| f == "errno=5"), "{e:?}");
    let _ = f.set_len(0);
}
