# Stage: skin_rl. Rules, target rule `skin_rl`, and the files it registers with register_targets().
