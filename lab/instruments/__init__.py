"""What the lab measures about itself: the GIL meter, the core meter and the stats board forked children share."""
