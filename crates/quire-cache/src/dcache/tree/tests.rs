use super::super::entry::FileKind;
use super::*;

fn ident(ino: u64, kind: FileKind) -> Option<Identity> {
    Some(Identity { dev: 1, ino, kind })
}

fn core(policy: RefPolicy, max_unused: usize) -> Core {
    Core::new(policy, max_unused, 4, ident(1, FileKind::Dir).unwrap())
}

fn add<'a>(c: &'a Core, p: &Dentry, name: &str, ino: u64, kind: FileKind) -> DentryRef<'a> {
    c.d_alloc(
        p,
        name.as_bytes(),
        hash_name(name.as_bytes()),
        ident(ino, kind),
        0,
    )
}

#[test]
fn counts_and_retention() {
    for policy in [RefPolicy::Cmpxchg, RefPolicy::Spinlock] {
        let c = core(policy, 100);
        let root = c.root_ref();
        let a = add(&c, &root, "a", 2, FileKind::Dir);
        let b = add(&c, &a, "b", 3, FileKind::File);
        assert_eq!(a.ref_count(), 2, "ours + b's");
        assert_eq!(c.nr_dentry(), 3);
        let b2 = b.clone();
        assert_eq!(b.ref_count(), 2);
        drop(b2);
        drop(b);
        // Retained: count 0, on the LRU, still found.
        assert_eq!(c.nr_unused(), 1);
        assert_eq!(c.nr_dentry(), 3);
        let g = rcu::pin();
        let (found, _) = c.lookup_rcu(&a, b"b", hash_name(b"b"), &g).unwrap();
        assert_eq!(found.ref_count(), 0);
        drop(g);
        let b = c.lookup_ref(&a, b"b", hash_name(b"b")).unwrap();
        assert_eq!(b.ref_count(), 1);
        let p = b.dget_parent();
        assert!(DentryRef::ptr_eq(&p, &a));
        assert_eq!(c.path_of(&b), (b"/a/b".to_vec(), false));
        drop((p, b, a, root));
        assert_eq!(c.shrink_all(), 2);
        assert_eq!(c.nr_dentry(), 1);
        assert_eq!(c.nr_unused(), 0);
    }
}

#[test]
fn unhashed_entries_die_with_their_last_reference_and_free_their_parents() {
    let c = core(RefPolicy::Cmpxchg, 100);
    let root = c.root_ref();
    let a = add(&c, &root, "a", 2, FileKind::Dir);
    let b = add(&c, &a, "b", 3, FileKind::Dir);
    let x = add(&c, &b, "x", 4, FileKind::File);
    c.d_drop(&b);
    c.d_drop(&a);
    assert_eq!(c.path_of(&x), (b"/a/b/x".to_vec(), true));
    assert!(c.lookup_ref(&a, b"b", hash_name(b"b")).is_none());
    drop((a, b));
    assert_eq!(c.nr_dentry(), 4, "kept alive by x");
    // x is hashed: retained; shrinking kills x, then b and a in one chain.
    drop(x);
    assert_eq!(c.nr_dentry(), 4);
    c.shrink_all();
    assert_eq!(c.nr_dentry(), 1);
    assert_eq!(root.ref_count(), 2, "core's + ours");
}

#[test]
fn lru_is_bounded_and_gives_second_chances() {
    let c = core(RefPolicy::Cmpxchg, 8);
    let root = c.root_ref();
    for i in 0..20 {
        drop(add(&c, &root, &format!("f{i}"), 10 + i, FileKind::File));
        assert!(c.nr_unused() <= 8, "{}", c.nr_unused());
    }
    assert_eq!(c.nr_dentry(), 9);
    // The newest survive.
    assert!(c.lookup_ref(&root, b"f19", hash_name(b"f19")).is_some());
    assert!(c.lookup_ref(&root, b"f0", hash_name(b"f0")).is_none());
}

#[test]
fn d_move_rehashes_and_moves_children() {
    let c = core(RefPolicy::Cmpxchg, 100);
    let root = c.root_ref();
    let a = add(&c, &root, "a", 2, FileKind::Dir);
    let q = add(&c, &root, "q", 3, FileKind::Dir);
    let x = add(&c, &a, "x", 4, FileKind::File);
    {
        let w = c.rename_begin();
        c.d_move(&w, &a, &q, b"a2", hash_name(b"a2"));
    }
    assert_eq!(c.path_of(&x), (b"/q/a2/x".to_vec(), false));
    assert!(c.lookup_ref(&root, b"a", hash_name(b"a")).is_none());
    let a2 = c.lookup_ref(&q, b"a2", hash_name(b"a2")).unwrap();
    assert!(DentryRef::ptr_eq(&a2, &a));
    assert_eq!(root.ref_count(), 3, "core + ours + q");
    assert_eq!(q.ref_count(), 2, "ours + a2");
    assert_eq!(a.name(), "a2");
}
