# Stage: evaluate. Rules, target rule `evaluate`, and the files it registers with register_targets().
