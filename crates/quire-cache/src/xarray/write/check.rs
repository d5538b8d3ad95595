//! The array's invariants, walked under the lock for tests and models ([`XArray::check`]).

use super::*;

impl<P: XaPointer> XaLock<'_, P> {
    /// See [`XArray::check`].
    pub(in crate::xarray) fn check(&self) -> Result<(), String> {
        let h = self.head();
        let mut nodes = 0usize;
        if h == 0 && self.head_marks() != 0 {
            return Err("marks on an empty array".into());
        }
        if is_internal(h) && !is_node(h) {
            return Err(format!("head holds internal word {h:#x}"));
        }
        if is_node(h) {
            // SAFETY: the root is linked.
            let root = unsafe { nd(node_ptr(h)) };
            if root.count() == 1 && root.slot(0) != 0 {
                let w = root.slot(0);
                if is_node(w) || root.shift() == 0 {
                    return Err("the tree was not shrunk".into());
                }
            }
            if root.any_marks() != self.head_marks() {
                return Err(format!(
                    "head marks {:#b} but root marks {:#b}",
                    self.head_marks(),
                    root.any_marks()
                ));
            }
            self.check_node(node_ptr(h), 0, &mut nodes)?;
        }
        let counted = self.xa.nodes.load(Ordering::Relaxed);
        if nodes != counted {
            return Err(format!(
                "{nodes} nodes linked but node_count says {counted}"
            ));
        }
        if let Some((list, token)) = &self.xa.list {
            // A list only this array uses holds exactly its listed nodes.
            let tokens = list.tokens();
            if tokens.iter().all(|t| t == token) {
                let listed = self.count_listed(h);
                if tokens.len() != listed || list.len() != listed {
                    return Err(format!(
                        "{listed} nodes listed but the list holds {} (len {})",
                        tokens.len(),
                        list.len()
                    ));
                }
            }
        }
        Ok(())
    }

    fn count_listed(&self, w: usize) -> usize {
        if !is_node(w) {
            return 0;
        }
        // SAFETY: linked, under the lock.
        let node = unsafe { nd(node_ptr(w)) };
        let own = usize::from(node.listed.load(Ordering::Relaxed));
        own + (0..CHUNK)
            .map(|j| self.count_listed(node.slot(j)))
            .sum::<usize>()
    }

    fn check_node(&self, p: *const Node, base: u64, nodes: &mut usize) -> Result<(), String> {
        *nodes += 1;
        // SAFETY: linked, under the lock.
        let node = unsafe { nd(p) };
        let shift = node.shift();
        if shift % CHUNK_SHIFT != 0 {
            return Err(format!("node at {base:#x} has shift {shift}"));
        }
        if node.base != base {
            return Err(format!(
                "node at {base:#x} says its base is {:#x}",
                node.base
            ));
        }
        let mut used = 0;
        let mut values = 0;
        let mut j = 0;
        while j < CHUNK {
            let w = node.slot(j);
            let bits = node.marks_at(j);
            if j >= slots_in(shift) && w != 0 {
                return Err(format!(
                    "node at {base:#x}: slot {j} is beyond the index space"
                ));
            }
            if w == 0 {
                if bits != 0 {
                    return Err(format!("node at {base:#x}: marks on empty slot {j}"));
                }
                j += 1;
                continue;
            }
            if w == RETRY || is_sibling(w) {
                return Err(format!(
                    "node at {base:#x}: stray internal word {w:#x} in slot {j}"
                ));
            }
            if is_node(w) {
                used += 1;
                // SAFETY: linked child.
                let child = unsafe { nd(node_ptr(w)) };
                if child.shift() + CHUNK_SHIFT != shift {
                    return Err(format!("node at {base:#x}: child shift {}", child.shift()));
                }
                if child.any_marks() != bits {
                    return Err(format!(
                        "node at {base:#x}: slot {j} marks {bits:#b} but child {:#b}",
                        child.any_marks()
                    ));
                }
                if child.count() == 0 {
                    return Err(format!("node at {base:#x}: empty child in slot {j}"));
                }
                self.check_node(node_ptr(w), base + ((j as u64) << shift), nodes)?;
                j += 1;
                continue;
            }
            let ext = node.extent(j);
            if !ext.is_power_of_two() || j % ext != 0 {
                return Err(format!(
                    "node at {base:#x}: entry at slot {j} spans {ext} slots"
                ));
            }
            for q in 1..ext {
                if node.marks_at(j + q) != 0 {
                    return Err(format!(
                        "node at {base:#x}: marks on sibling slot {}",
                        j + q
                    ));
                }
            }
            used += ext;
            if is_value(w) {
                values += ext;
            }
            j += ext;
        }
        if values as u32 != node.values() {
            return Err(format!(
                "node at {base:#x}: nr_values {} but {values} value slots",
                node.values()
            ));
        }
        let listed = node.listed.load(Ordering::Relaxed);
        match &self.xa.list {
            Some((list, _)) => {
                if listed != node.values_only() {
                    return Err(format!(
                        "node at {base:#x}: listed {listed} but holds only values: {}",
                        node.values_only()
                    ));
                }
                if listed != list.contains(p) {
                    return Err(format!(
                        "node at {base:#x}: listed flag disagrees with the list"
                    ));
                }
            }
            None if listed => return Err(format!("node at {base:#x}: listed without a list")),
            None => {}
        }
        if used as u32 != node.count() {
            return Err(format!(
                "node at {base:#x}: count {} but {used} slots used",
                node.count()
            ));
        }
        Ok(())
    }
}
