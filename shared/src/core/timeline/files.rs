//! The timeline as files an editor imports. (Written by the exporters' author.)
