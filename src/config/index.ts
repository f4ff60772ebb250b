export { loadConfig } from './load.js';
export { type Config, ConfigError, type ConfigProblem, SETTINGS, type Setting } from './schema.js';
