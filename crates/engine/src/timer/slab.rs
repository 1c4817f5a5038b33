//! Where the timers live: one `Vec` of entries, each on at most one doubly
//! linked list threaded through the entries by index.
//!
//! Indices instead of pointers keep this safe code, and unlinking an entry
//! from the middle of its list is O(1), which is what makes a cancel remove
//! the timer for real. A freed entry's generation changes, so a `TimerId` of a
//! timer that already fired or was cancelled never reaches the entry's next
//! occupant.

use std::num::NonZeroU32;

/// "No entry": the end of a list.
const NIL: u32 = u32::MAX;
/// The `list` of an entry on no list: free, or between lists.
const NO_LIST: u16 = u16::MAX;

/// A timer's handle: its entry and that entry's generation when armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId {
    index: u32,
    generation: NonZeroU32,
}

impl TimerId {
    pub(super) fn index(self) -> u32 {
        self.index
    }
}

/// Head and tail of one list.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

struct Entry<T> {
    /// The deadline in ticks (meaningful while armed).
    deadline: u64,
    prev: u32,
    /// The next entry on the same list, or on the free list.
    next: u32,
    generation: NonZeroU32,
    list: u16,
    /// `Some` exactly while the timer is armed.
    payload: Option<T>,
}

/// Entries and the lists they are on. Lists are numbered `0..lists`.
pub(super) struct Slab<T> {
    entries: Vec<Entry<T>>,
    lists: Box<[List]>,
    free: u32,
    live: usize,
}

impl<T> Slab<T> {
    pub fn new(lists: usize) -> Self {
        Self {
            entries: Vec::new(),
            lists: vec![EMPTY; lists].into_boxed_slice(),
            free: NIL,
            live: 0,
        }
    }

    /// Stores an armed timer, on no list yet.
    pub fn insert(&mut self, deadline: u64, payload: T) -> TimerId {
        self.live += 1;
        let index = if self.free == NIL {
            let index = u32::try_from(self.entries.len())
                .ok()
                .filter(|&i| i != NIL)
                .expect("more than 2^32 - 1 timers armed at once");
            self.entries.push(Entry {
                deadline,
                prev: NIL,
                next: NIL,
                generation: NonZeroU32::MIN,
                list: NO_LIST,
                payload: Some(payload),
            });
            index
        } else {
            let index = self.free;
            let e = &mut self.entries[index as usize];
            self.free = e.next;
            e.deadline = deadline;
            e.next = NIL;
            e.payload = Some(payload);
            index
        };
        TimerId {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    /// The entry of `id`, if that timer is still armed.
    pub fn find(&self, id: TimerId) -> Option<u32> {
        let e = self.entries.get(id.index as usize)?;
        (e.generation == id.generation && e.payload.is_some()).then_some(id.index)
    }

    /// Unlinks entry `index` and frees it: its handle stops being valid.
    pub fn remove(&mut self, index: u32) -> (TimerId, T) {
        self.unlink(index);
        self.live -= 1;
        let e = &mut self.entries[index as usize];
        let id = TimerId {
            index,
            generation: e.generation,
        };
        let payload = e.payload.take().expect("removing a free timer entry");
        e.generation =
            NonZeroU32::new(e.generation.get().wrapping_add(1)).unwrap_or(NonZeroU32::MIN);
        e.next = self.free;
        self.free = index;
        (id, payload)
    }

    pub fn deadline(&self, index: u32) -> u64 {
        self.entries[index as usize].deadline
    }

    /// The list entry `index` is on.
    pub fn list_of(&self, index: u32) -> u16 {
        self.entries[index as usize].list
    }

    pub fn is_empty_list(&self, list: u16) -> bool {
        self.lists[usize::from(list)].head == NIL
    }

    pub fn front(&self, list: u16) -> Option<u32> {
        let head = self.lists[usize::from(list)].head;
        (head != NIL).then_some(head)
    }

    /// Appends entry `index`, which is on no list, to `list`.
    pub fn push_back(&mut self, list: u16, index: u32) {
        let tail = self.lists[usize::from(list)].tail;
        let e = &mut self.entries[index as usize];
        debug_assert_eq!(e.list, NO_LIST);
        e.list = list;
        e.prev = tail;
        e.next = NIL;
        match tail {
            NIL => self.lists[usize::from(list)].head = index,
            _ => self.entries[tail as usize].next = index,
        }
        self.lists[usize::from(list)].tail = index;
    }

    /// Takes entry `index` off its list, if it is on one.
    pub fn unlink(&mut self, index: u32) {
        let e = &mut self.entries[index as usize];
        let (list, prev, next) = (e.list, e.prev, e.next);
        if list == NO_LIST {
            return;
        }
        e.list = NO_LIST;
        e.prev = NIL;
        e.next = NIL;
        match prev {
            NIL => self.lists[usize::from(list)].head = next,
            _ => self.entries[prev as usize].next = next,
        }
        match next {
            NIL => self.lists[usize::from(list)].tail = prev,
            _ => self.entries[next as usize].prev = prev,
        }
    }

    /// How many timers are armed.
    pub fn len(&self) -> usize {
        self.live
    }

    /// How many entries exist, armed or free: the most ever armed at once.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.entries.len()
    }
}
