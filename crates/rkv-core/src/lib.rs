//! rkv-core
