"""Advantages, the policy-gradient loss and the one learner every self-play method shares."""
