//! rkv-engine
