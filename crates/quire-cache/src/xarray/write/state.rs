//! The writer's cursor, after `xa_state`.

use super::*;

impl<'a, P: XaPointer> XaLock<'a, P> {
    /// A cursor at `index` that walks once and then works at the position it reached.
    pub fn state(&mut self, index: u64) -> XaState<'_, 'a, P> {
        XaState {
            lock: self,
            index,
            path: Path::new(),
            walked: false,
            generation: 0,
        }
    }
}

/// A writer's cursor (after `xa_state`): it walks to its index once, then loads, stores and
/// changes marks at the position reached, and moves to nearby indices without walking from the
/// head again. Get one from [`XaLock::state`].
pub struct XaState<'l, 'a, P: XaPointer> {
    lock: &'l mut XaLock<'a, P>,
    index: u64,
    path: Path,
    walked: bool,
    generation: u64,
}

impl<'l, 'a, P: XaPointer> XaState<'l, 'a, P> {
    /// The cursor's index.
    pub fn index(&self) -> u64 {
        self.index
    }

    fn valid(&self) -> bool {
        self.walked && self.generation == self.lock.generation
    }

    /// Walks from the head if the cursor has no valid position; then makes sure the path
    /// reaches the bottom at its index.
    fn ensure(&mut self) {
        if !self.valid() {
            self.path = self.lock.walk(self.index, 0);
            self.walked = true;
            self.generation = self.lock.generation;
        } else if self.path.len == 0 {
            // The tree may have grown from a head entry since.
            if is_node(self.lock.head()) {
                self.path = self.lock.walk(self.index, 0);
            }
        } else {
            self.lock.descend(&mut self.path, self.index, 0);
        }
    }

    /// Moves the cursor to `index`, keeping the part of its path that also leads there (no
    /// walk from the head when `index` is in the same node).
    #[doc(alias = "xas_set")]
    pub fn set_index(&mut self, index: u64) {
        if self.valid() && self.path.len > 0 {
            // SAFETY: a valid path's nodes are linked.
            let root = unsafe { nd(self.path.nodes[0]) };
            if covers(root.shift(), index) {
                // Keep the nodes whose range holds `index` too.
                let mut keep = 1;
                while keep < self.path.len {
                    // SAFETY: as above.
                    let above = unsafe { nd(self.path.nodes[keep]) }.shift() + CHUNK_SHIFT;
                    if index >> above != self.index >> above {
                        break;
                    }
                    keep += 1;
                }
                self.path.len = keep;
                self.lock.descend(&mut self.path, index, 0);
            } else {
                self.walked = false;
            }
        } else {
            self.walked = false;
        }
        self.index = index;
    }

    /// Moves to the next index (staying at `u64::MAX`) and loads its entry.
    #[doc(alias = "xas_next")]
    pub fn advance(&mut self) -> Option<Entry<&P::Target>> {
        self.set_index(self.index.saturating_add(1));
        self.load()
    }

    /// The entry at the cursor.
    #[doc(alias = "xas_load")]
    pub fn load(&mut self) -> Option<Entry<&P::Target>> {
        self.ensure();
        // SAFETY: under the lock, nothing is removed while `self` is borrowed shared.
        unsafe { decode_ref(self.lock.entry_at(&self.path, self.index).word) }
    }

    /// The order of the entry at the cursor (0 if none).
    #[doc(alias = "xas_get_order")]
    pub fn get_order(&mut self) -> u32 {
        self.ensure();
        self.lock.entry_at(&self.path, self.index).order()
    }

    /// Stores at the cursor with [`XArray::store`]'s semantics.
    #[doc(alias = "xas_store")]
    pub fn store(
        &mut self,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        let new = encode(entry)?;
        self.ensure();
        let old = self.lock.store_keep(&mut self.path, self.index, new);
        // SAFETY: removed from the array; ours.
        Ok(unsafe { decode_retired(old) })
    }

    /// Stores with [`XArray::store_order`]'s semantics over the range of `order` around the
    /// cursor's index.
    pub fn store_order(
        &mut self,
        order: u32,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        let new = encode_order(order, entry)?;
        self.ensure();
        let start = self.index & !span(order);
        let old = self.lock.store_from(&mut self.path, start, order, new);
        // SAFETY: removed from the array; ours.
        Ok(unsafe { decode_retired(old) })
    }

    /// Sets `mark` on the entry at the cursor; false if there is none.
    #[doc(alias = "xas_set_mark")]
    pub fn set_mark(&mut self, mark: Mark) -> bool {
        self.ensure();
        self.lock.change_mark(&self.path, self.index, mark, true)
    }

    /// Clears `mark` on the entry at the cursor; false if there is none.
    #[doc(alias = "xas_clear_mark")]
    pub fn clear_mark(&mut self, mark: Mark) -> bool {
        self.ensure();
        self.lock.change_mark(&self.path, self.index, mark, false)
    }

    /// Whether the entry at the cursor has `mark`.
    #[doc(alias = "xas_get_mark")]
    pub fn get_mark(&mut self, mark: Mark) -> bool {
        self.ensure();
        self.lock.get_mark_at(&self.path, self.index, mark)
    }
}
