// placeholder until the scheduler lands
