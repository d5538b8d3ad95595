//! Splitting a multi-order entry into smaller ones (the kernel's `xas_split`): the nodes it needs,
//! allocated outside the lock, and the split itself, copying the entry's marks to every piece.

use super::*;

impl<P: XaPointer> XaLock<'_, P> {
    /// Splits the entry (canonical slot `c` of `node`, order `big`) into pieces of `order`,
    /// using `reserve` for the nodes below its level. `dup` makes another copy of the word for
    /// every piece after the first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn split_entry(
        &mut self,
        node_p: *const Node,
        c: usize,
        word: usize,
        big: u32,
        order: u32,
        reserve: &mut NodeReserve,
        dup: &dyn Fn(usize) -> usize,
    ) {
        // SAFETY: found under the lock, linked.
        let node = unsafe { nd(node_p) };
        let top = node.shift();
        let s = level_of(order);
        let n = 1usize << (big - top);
        let bits = node.marks_at(c);
        if s == top {
            // Same level: rewrite the run of slots as smaller runs.
            let m = 1usize << (order - s);
            for piece in 1..n / m {
                let j = c + piece * m;
                node.set_marks_at(j, bits);
                node.set(j, dup(word));
                for q in 1..m {
                    node.set(j + q, mk_sibling(j));
                }
            }
            return;
        }
        let mut built = [ptr::null::<Node>(); CHUNK];
        let mut used_original = false;
        for (j, b) in built.iter_mut().enumerate().take(n) {
            *b = self.build_split(
                top - CHUNK_SHIFT,
                node.base + (((c + j) as u64) << top),
                s,
                order,
                word,
                bits,
                reserve,
                dup,
                &mut used_original,
            );
        }
        for j in 0..n {
            node.set_marks_at(c + j, bits);
        }
        // Siblings first: a reader that meets a sibling whose canonical slot is already a node
        // starts over from the head.
        for j in (0..n).rev() {
            node.set(c + j, mk_node(built[j]));
        }
        // The run of value slots became children.
        if is_value(word) {
            node.set_values(node.values() - n as u32);
        }
        self.update_node(node_p);
        // A root whose only slot 0 became a node shrinks.
        self.shrink();
    }

    /// Builds one full subtree of a split, from reserve nodes.
    #[allow(clippy::too_many_arguments)]
    fn build_split(
        &mut self,
        shift: u32,
        base: u64,
        s: u32,
        order: u32,
        word: usize,
        bits: u8,
        reserve: &mut NodeReserve,
        dup: &dyn Fn(usize) -> usize,
        used_original: &mut bool,
    ) -> *const Node {
        let p = self.adopt(reserve.take(shift, base));
        // SAFETY: ours, not yet published.
        let node = unsafe { nd(p) };
        if shift == s {
            let m = 1usize << (order - s);
            let mut j = 0;
            while j < CHUNK {
                let w = if *used_original { dup(word) } else { word };
                *used_original = true;
                node.slots[j].store(w, Ordering::Relaxed);
                for q in 1..m {
                    node.slots[j + q].store(mk_sibling(j), Ordering::Relaxed);
                }
                node.set_marks_at(j, bits);
                j += m;
            }
        } else {
            for j in 0..CHUNK {
                let child = self.build_split(
                    shift - CHUNK_SHIFT,
                    base + ((j as u64) << shift),
                    s,
                    order,
                    word,
                    bits,
                    reserve,
                    dup,
                    used_original,
                );
                node.slots[j].store(mk_node(child), Ordering::Relaxed);
                node.set_marks_at(j, bits);
            }
        }
        node.set_count(CHUNK as u32);
        if shift == s && is_value(word) {
            node.set_values(CHUNK as u32);
        }
        self.update_node(p);
        p
    }

    /// How many nodes [`XaLock::split_with`] needs to split the entry covering `index` into
    /// pieces of `order` (0 when nothing needs to be done or the split needs none).
    #[doc(alias = "xas_split_alloc")]
    pub fn split_needs(&self, index: u64, order: u32) -> Result<usize, XaError> {
        if order > MAX_ORDER {
            return Err(XaError::BadOrder { order });
        }
        let path = self.walk(index, 0);
        let loc = self.entry_at(&path, index);
        if loc.word == 0 {
            return Err(XaError::NotPresent { index });
        }
        let have = loc.order();
        if order > have {
            return Err(XaError::BadSplit { have, want: order });
        }
        let nodes = split_nodes(have, order);
        if nodes > MAX_SPLIT_NODES {
            return Err(XaError::SplitTooLarge {
                have,
                want: order,
                nodes,
            });
        }
        Ok(nodes)
    }

    /// Splits the entry covering `index` into pieces of `order` (each a clone of the pointer,
    /// with the entry's marks), taking the nodes it needs from `reserve`, allocated beforehand
    /// outside the lock.
    #[doc(alias = "xas_split")]
    #[cfg_attr(not(feature = "bench-internals"), doc(hidden))] // its reserve type is internal
    pub fn split_with(
        &mut self,
        index: u64,
        order: u32,
        reserve: &mut NodeReserve,
    ) -> Result<(), XaError>
    where
        P: Clone,
    {
        let nodes = self.split_needs(index, order)?;
        let path = self.walk(index, 0);
        let loc = self.entry_at(&path, index);
        let have = loc.order();
        if order == have {
            return Ok(());
        }
        if reserve.len() < nodes {
            return Err(XaError::ReserveTooSmall {
                needed: nodes,
                have: reserve.len(),
            });
        }
        let dup = |w: usize| -> usize {
            if is_pointer(w) {
                // SAFETY: `w` is a pointer word the array owns; the `ManuallyDrop` keeps that
                // ownership with the array while we clone it.
                let p = ManuallyDrop::new(unsafe {
                    P::from_raw(NonNull::new_unchecked(w as *mut P::Target))
                });
                P::into_raw(P::clone(&p)).as_ptr() as usize
            } else {
                w
            }
        };
        self.split_entry(loc.node, loc.canon, loc.word, have, order, reserve, &dup);
        Ok(())
    }
}
