//! The fuzz input as structured choices (`arbitrary::Unstructured`): every choice is total, so
//! any input decodes to a configuration, a request and the reader's answers; an exhausted input
//! picks the first option of every choice, which is the plain case.

use arbitrary::Unstructured;

pub struct Pick<'a> {
    u: Unstructured<'a>,
    /// A size the client declares was drawn over every limit (a shape, a binary length): the
    /// seed tools keep such inputs out of the seeds (they are the regression inputs' job).
    pub hostile_size: bool,
}

impl<'a> Pick<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Pick {
            u: Unstructured::new(data),
            hostile_size: false,
        }
    }

    /// A choice in `0..n` (0 once the input is exhausted).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        self.u.int_in_range(0..=n - 1).unwrap_or(0)
    }

    /// True one time in `n` (false once the input is exhausted).
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == n - 1
    }

    /// One of `items` (the first once the input is exhausted).
    pub fn of<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    /// Up to `max` raw bytes.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max + 1);
        self.u.bytes(n).map(<[u8]>::to_vec).unwrap_or_default()
    }

    /// Any u64 the input spells (0 once exhausted).
    pub fn u64(&mut self) -> u64 {
        self.u.arbitrary().unwrap_or(0)
    }
}
