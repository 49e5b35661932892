/**
 * The page's words in English, Spanish and French, and which of them a request gets:
 * `ui.language`, else the browser's Accept-Language, else English. Code names (X3, NS) come
 * from the code lists (src/milestones/codes.ts), in Spanish and French from code-names.ts.
 */
export type Lang = 'en' | 'es' | 'fr';
export const LANGS: readonly Lang[] = ['en', 'es', 'fr'];

const en = {
  title: "Driver's page",
  pin: 'PIN',
  logIn: 'Log in',
  logOut: 'Log out',
  wrongPin: 'Wrong PIN.',
  locked: 'Too many wrong PINs from this device: try again in {min} min.',
  online: 'Online',
  offline: 'Waiting for coverage since {time}',
  waiting: '{n} waiting',
  lastDelivery: 'last delivery {time}',
  never: 'never',
  noLoads: 'No active load.',
  load: 'Load',
  nextStop: 'Next stop',
  noStop: 'No stop left.',
  appointment: 'Appointment',
  truck: 'Truck',
  near: 'near {place}, {ago}',
  at: 'at {lat}, {lon}, {ago}',
  noFix: 'no position yet',
  ago: '{n} min ago',
  justNow: 'just now',
  hoursAgo: '{n} h ago',
  arrived: 'Arrived',
  departed: 'Departed',
  delay: 'Report a delay',
  setAppointment: 'Set appointment',
  reason: 'Reason',
  happenedAt: 'It happened at (local time of the stop; empty: now)',
  appointmentAt: 'Appointment time (local time of the stop)',
  confirm: 'Confirm',
  cancel: 'Cancel',
  saved: 'Saved: {what}.',
  already: 'Already recorded at {time}.',
  recent: 'Last milestones',
  none: 'None yet.',
  stateWaiting: 'waiting',
  stateDelivered: 'delivered',
  stateRefused: 'refused: {reason}',
  stop: 'stop {n}',
  pickup: 'pick-up',
  delivery: 'delivery',
  other: 'stop',
  badRequest: 'The form was refused (it came from another page, or too late): reload the page and try again.',
  themeSun: 'High contrast (sunlight)',
  themeNormal: 'Normal contrast',
};
type Words = typeof en;

const es: Words = {
  title: 'Página del conductor',
  pin: 'PIN',
  logIn: 'Entrar',
  logOut: 'Salir',
  wrongPin: 'PIN incorrecto.',
  locked: 'Demasiados PIN incorrectos desde este dispositivo: vuelva a intentarlo en {min} min.',
  online: 'En línea',
  offline: 'Esperando cobertura desde las {time}',
  waiting: '{n} en espera',
  lastDelivery: 'última entrega {time}',
  never: 'nunca',
  noLoads: 'Ninguna carga activa.',
  load: 'Carga',
  nextStop: 'Próxima parada',
  noStop: 'No quedan paradas.',
  appointment: 'Cita',
  truck: 'Camión',
  near: 'cerca de {place}, {ago}',
  at: 'en {lat}, {lon}, {ago}',
  noFix: 'sin posición todavía',
  ago: 'hace {n} min',
  justNow: 'ahora mismo',
  hoursAgo: 'hace {n} h',
  arrived: 'Llegué',
  departed: 'Salí',
  delay: 'Avisar de un retraso',
  setAppointment: 'Fijar cita',
  reason: 'Motivo',
  happenedAt: 'Ocurrió a las (hora local de la parada; vacío: ahora)',
  appointmentAt: 'Hora de la cita (hora local de la parada)',
  confirm: 'Confirmar',
  cancel: 'Cancelar',
  saved: 'Guardado: {what}.',
  already: 'Ya registrado a las {time}.',
  recent: 'Últimos hitos',
  none: 'Ninguno todavía.',
  stateWaiting: 'en espera',
  stateDelivered: 'entregado',
  stateRefused: 'rechazado: {reason}',
  stop: 'parada {n}',
  pickup: 'recogida',
  delivery: 'entrega',
  other: 'parada',
  badRequest: 'El formulario fue rechazado (vino de otra página, o demasiado tarde): recargue la página e inténtelo de nuevo.',
  themeSun: 'Alto contraste (sol)',
  themeNormal: 'Contraste normal',
};

const fr: Words = {
  title: 'Page du conducteur',
  pin: 'Code PIN',
  logIn: 'Entrer',
  logOut: 'Sortir',
  wrongPin: 'Code PIN erroné.',
  locked: 'Trop de codes erronés depuis cet appareil : réessayez dans {min} min.',
  online: 'En ligne',
  offline: 'En attente de réseau depuis {time}',
  waiting: '{n} en attente',
  lastDelivery: 'dernier envoi {time}',
  never: 'jamais',
  noLoads: 'Aucun chargement actif.',
  load: 'Chargement',
  nextStop: 'Prochain arrêt',
  noStop: 'Plus aucun arrêt.',
  appointment: 'Rendez-vous',
  truck: 'Camion',
  near: 'près de {place}, {ago}',
  at: 'à {lat}, {lon}, {ago}',
  noFix: 'pas encore de position',
  ago: 'il y a {n} min',
  justNow: "à l'instant",
  hoursAgo: 'il y a {n} h',
  arrived: 'Arrivé',
  departed: 'Parti',
  delay: 'Signaler un retard',
  setAppointment: 'Fixer le rendez-vous',
  reason: 'Motif',
  happenedAt: "C'est arrivé à (heure locale de l'arrêt ; vide : maintenant)",
  appointmentAt: "Heure du rendez-vous (heure locale de l'arrêt)",
  confirm: 'Confirmer',
  cancel: 'Annuler',
  saved: 'Enregistré : {what}.',
  already: 'Déjà enregistré à {time}.',
  recent: 'Derniers jalons',
  none: 'Aucun pour le moment.',
  stateWaiting: 'en attente',
  stateDelivered: 'livré',
  stateRefused: 'refusé : {reason}',
  stop: 'arrêt {n}',
  pickup: 'chargement',
  delivery: 'livraison',
  other: 'arrêt',
  badRequest: 'Le formulaire a été refusé (il venait d’une autre page, ou trop tard) : rechargez la page et réessayez.',
  themeSun: 'Contraste élevé (plein soleil)',
  themeNormal: 'Contraste normal',
};

const WORDS: Record<Lang, Words> = { en, es, fr };
export type Key = keyof Words;

/** The words of `lang`, with `{name}` filled in from `vars`. */
export function translator(lang: Lang): (key: Key, vars?: Record<string, string | number>) => string {
  const w = WORDS[lang];
  return (key, vars) => w[key].replace(/\{(\w+)\}/g, (_, k: string) => String(vars?.[k] ?? `{${k}}`));
}

/** `ui.language` if set, else the first of Accept-Language's languages the page has (by q), else en. */
export function pickLanguage(configured: Lang | undefined, acceptLanguage: string | undefined): Lang {
  if (configured) return configured;
  const wanted = (acceptLanguage ?? '')
    .split(',')
    .map((part, i) => {
      const [tag, ...params] = part.trim().toLowerCase().split(';');
      const q = params.map((p) => /^\s*q=([\d.]+)/.exec(p)?.[1]).find(Boolean);
      return { lang: tag.split('-')[0], q: q === undefined ? 1 : Number(q), i };
    })
    .filter((x) => x.q > 0)
    .sort((a, b) => b.q - a.q || a.i - b.i);
  return (wanted.find((x) => (LANGS as readonly string[]).includes(x.lang))?.lang as Lang | undefined) ?? 'en';
}
