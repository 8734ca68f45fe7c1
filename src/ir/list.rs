//! A list many nodes may hold at once (see [`SharedList`]): a node's attributes
//! ([`super::Attrs`]) and its metadata ([`super::MetaList`]).

use std::sync::Arc;

/// A list that nodes share: the nodes one rewrite makes from one (the pieces of a split Conv)
/// hold one list of attributes, and every node a rewrite makes one list of its stamps. A clone
/// is a count. Read it as a slice; change it with [`SharedList::make_mut`] (which copies a
/// shared list first). An empty list holds no allocation.
pub struct SharedList<T>(Option<Arc<[T]>>);

impl<T> Default for SharedList<T> {
    fn default() -> Self {
        SharedList(None)
    }
}

impl<T> Clone for SharedList<T> {
    fn clone(&self) -> Self {
        SharedList(self.0.clone())
    }
}

impl<T> std::ops::Deref for SharedList<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl<'a, T> IntoIterator for &'a SharedList<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> From<Vec<T>> for SharedList<T> {
    fn from(v: Vec<T>) -> Self {
        SharedList((!v.is_empty()).then(|| v.into()))
    }
}

impl<T> FromIterator<T> for SharedList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        SharedList::from(it.into_iter().collect::<Vec<_>>())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SharedList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq> PartialEq for SharedList<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T> SharedList<T> {
    /// Whether `other` is this very list (not only equal entries).
    pub fn same_list(&self, other: &SharedList<T>) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
    /// The entries to change in place (copied first when another node shares them).
    pub fn make_mut(&mut self) -> &mut [T]
    where
        T: Clone,
    {
        match &mut self.0 {
            Some(a) => Arc::make_mut(a),
            None => &mut [],
        }
    }
    /// The list with `entry` added at its end (a new list, allocated at its length).
    pub fn push(&mut self, entry: T)
    where
        T: Clone,
    {
        self.0 = Some(self.iter().cloned().chain([entry]).collect());
    }
    /// The entries as a vector of their own: moved out when no other node holds the list
    /// (each left behind as `vacant` gives), copied when one does.
    pub fn into_vec_with(self, vacant: impl Fn() -> T) -> Vec<T>
    where
        T: Clone,
    {
        let Some(mut list) = self.0 else {
            return Vec::new();
        };
        match Arc::get_mut(&mut list) {
            Some(own) => own
                .iter_mut()
                .map(|a| std::mem::replace(a, vacant()))
                .collect(),
            None => list.to_vec(),
        }
    }
}
