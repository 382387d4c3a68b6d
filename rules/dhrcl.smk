# Stage: dhrcl. Rules, target rule `dhrcl`, and the files it registers with register_targets().
