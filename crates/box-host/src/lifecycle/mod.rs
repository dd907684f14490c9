//! Shared pieces of the box lifecycle verbs (new, enter, ls, open, doctor, repair, stop, start, rm).
