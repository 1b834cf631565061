//! keel-chaos: deterministic simulation of keel clusters. Empty until the chaos issue lands.
