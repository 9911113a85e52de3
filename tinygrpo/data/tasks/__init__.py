"""The built-in tasks, one file each; every module here registers its task with `tinygrpo.data.task.register_task`."""
