//! [`SharedList`]: a list whose copies share their elements, so that copying a list of
//! thousands costs a reference count per element and changing one element copies that
//! element only.

use std::ops::{Index, IndexMut, Range};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of `T` whose clones share their elements until one is changed (copy on write).
/// Two lists compare equal when their elements do; elements still shared compare without
/// being read, so comparing a list with a copy it was changed from costs one pointer
/// comparison per unchanged element.
#[derive(Debug)]
pub struct SharedList<T>(Vec<Arc<T>>);

impl<T> SharedList<T> {
    /// An empty list.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        self.0.get(index).map(|element| &**element)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.0.iter().map(|element| &**element)
    }

    pub fn push(&mut self, element: T) {
        self.0.push(Arc::new(element));
    }

    /// Whether the elements in `range` of both lists are equal (false when either list
    /// is shorter than the range).
    pub fn same_in(&self, other: &Self, range: Range<usize>) -> bool
    where
        T: PartialEq,
    {
        match (self.0.get(range.clone()), other.0.get(range)) {
            (Some(mine), Some(theirs)) => mine.iter().zip(theirs).all(|(a, b)| Arc::ptr_eq(a, b) || a == b),
            _ => false,
        }
    }

    /// Whether `other`'s elements are the first of this list.
    pub fn starts_with(&self, other: &Self) -> bool
    where
        T: PartialEq,
    {
        other.len() <= self.len() && self.same_in(other, 0..other.len())
    }
}

impl<T: Clone> SharedList<T> {
    /// The element at `index` to change: copied first if another list shares it.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.0.get_mut(index).map(Arc::make_mut)
    }
}

impl<T> Default for SharedList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for SharedList<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: PartialEq> PartialEq for SharedList<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.same_in(other, 0..self.len())
    }
}

impl<T> From<Vec<T>> for SharedList<T> {
    fn from(elements: Vec<T>) -> Self {
        Self(elements.into_iter().map(Arc::new).collect())
    }
}

impl<T> FromIterator<T> for SharedList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(elements: I) -> Self {
        Self(elements.into_iter().map(Arc::new).collect())
    }
}

impl<'a, T> IntoIterator for &'a SharedList<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Map<std::slice::Iter<'a, Arc<T>>, fn(&'a Arc<T>) -> &'a T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|element| &**element)
    }
}

impl<T> Index<usize> for SharedList<T> {
    type Output = T;
    fn index(&self, index: usize) -> &T {
        &self.0[index]
    }
}

impl<T: Clone> IndexMut<usize> for SharedList<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        Arc::make_mut(&mut self.0[index])
    }
}

impl<T: Serialize> Serialize for SharedList<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for SharedList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<T>::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_every_element_until_one_is_changed() {
        let list: SharedList<String> = (0..1_000).map(|n| n.to_string()).collect();
        let mut copy = list.clone();
        assert!((0..1_000).all(|n| std::ptr::eq(&list[n], &copy[n])), "a copy shares its elements");
        copy[500].push('!');
        assert_eq!((&list[500][..], &copy[500][..]), ("500", "500!"), "a change copies the element first");
        let shared = (0..1_000).filter(|n| std::ptr::eq(&list[*n], &copy[*n])).count();
        assert_eq!(shared, 999, "and only that element");
        assert!(list.same_in(&copy, 0..500) && list.same_in(&copy, 501..1_000));
        assert!(!list.same_in(&copy, 480..520) && !list.same_in(&copy, 990..1_001));
        assert_ne!(list, copy);
        copy[500].pop();
        assert_eq!(list, copy, "equal elements compare equal whether shared or not");
    }

    #[test]
    fn a_list_starts_with_its_earlier_copies_and_reads_back_as_a_plain_list() {
        let mut list: SharedList<u32> = vec![1, 2].into();
        let earlier = list.clone();
        list.push(3);
        assert!(list.starts_with(&earlier) && !earlier.starts_with(&list));
        let text = serde_json::to_string(&list).unwrap();
        assert_eq!(text, "[1,2,3]");
        assert_eq!(serde_json::from_str::<SharedList<u32>>(&text).unwrap(), list);
        assert_eq!(list.iter().rev().copied().collect::<Vec<_>>(), vec![3, 2, 1]);
    }
}
