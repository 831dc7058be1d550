"""The uniform array view of a tree ensemble, its exact routing, categories and encoders."""
