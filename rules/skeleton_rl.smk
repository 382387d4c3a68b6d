# Stage: skeleton_rl. Rules, target rule `skeleton_rl`, and the files it registers with register_targets().
