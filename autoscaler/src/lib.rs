//! The autoscaler service.
